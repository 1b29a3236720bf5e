/* strategy.h — what the engine and the data-parallel strategies share.
 * Private to runtime/parallel: nothing else includes it.
 *
 * A data-parallel strategy (ddp.c, zero.c, fsdp.c) keeps a rank's copy of the
 * parameters and gradients consistent with its data-parallel peers. It acts
 * only through the model's hooks (before/after each unit, forward and backward)
 * and through the calls below; the engine owns the step (micro-batches, global
 * norm, clipping, AdamW) and applies tensor parallelism to the model (tp.c).
 *
 * Every strategy exposes, per held unit, the SLICE of the unit's flat buffer that
 * this rank updates (the whole unit for DDP, comm_chunk's share for ZeRO / FSDP:
 * sizes_shard), with its parameters and its gradients synchronized over the data-
 * parallel group, so the engine can run one norm / clip / AdamW for all of them.
 *
 * Errors: hooks cannot return a status, so the first failed communication is
 * recorded in the context (strat_fail), later communication is skipped, and the
 * engine turns it into exit status 4 after the forward / backward returns. */
#ifndef DTRUN_STRATEGY_H
#define DTRUN_STRATEGY_H

#include <stddef.h>

#include "kernels/ops.h"
#include "lib/job/jobspec.h"
#include "lib/util/clock.h"
#include "runtime/comm/comm.h"
#include "runtime/model/model.h"
#include "runtime/parallel/account.h"
#include "runtime/parallel/sizes.h"
#include "runtime/parallel/tp.h"

typedef struct cp_ring cp_ring; /* cp.c's state */
typedef struct ep_disp ep_disp; /* ep.c's state */

typedef struct {
    /* fixed at setup */
    const job_spec *job;
    const dt_ops *ops;
    const sizes *sz;        /* THE buffer sizes: every strategy buffer is sized here */
    sizes_at at;            /* this rank's place in the mesh */
    int rank;               /* world rank, for messages */
    int n_units;            /* L + 2 */
    model **unit_model;     /* [n_units]: the chunk holding unit u on this rank, or NULL */
    comm *dp;               /* the gradient-reduction group: the data-parallel ranks sharing this
                               rank's pp and tp, with context parallelism every dp x cp of them
                               (at.dp is then this rank's place in it) */
    comm *shard;            /* FSDP / HSDP: the ranks a unit is sharded over (= dp for FSDP) */
    comm *replica;          /* HSDP: the ranks holding the same shard (NULL otherwise) */
    comm *tp;               /* tensor-parallel group */
    tp_group tpg;           /* the model's tp layers' view of it (tp_apply) */
    comm *cp;               /* context-parallel group (NULL with cp = 1) */
    cp_ring *cpr;           /* its ring (cp_apply) */
    comm *ep, *edp;         /* expert parallelism (parallel.ep > 1, else NULL): the ep group
                               splitting the experts, the experts' data-parallel group */
    ep_disp *epd;           /* the MoE dispatcher's state (ep_apply) */
    account *acct;
    /* element bytes (sizes.h): parameters (4, or 2 = bf16 under mixed precision),
     * gradients (train.grad_dtype), the gradient collectives (parallel.reduce_dtype) */
    size_t pe, ge, re;
    /* per step, set by the engine */
    int step;               /* 1-based, for messages */
    int training;           /* 0 during evaluation: forward only, no gradient work */
    int last_micro;         /* this rank's last backward of the step is running */
    double comm_s;          /* seconds blocked in communication (the engine reads and resets) */
    /* the first communication error */
    int failed;
    char err[512];
} strat_ctx;

/* Records a failed call (rc != COMM_OK) on communicator `c` as the context's error
 * "rank R: step S: WHAT: <comm's line>" unless one is recorded already. Returns rc. */
int strat_fail(strat_ctx *x, comm *c, int rc, const char *what);
/* Time blocked in communication since t0 (clock_now_s) on `what`: added to
 * comm_s and, with --trace, a span on the rank's comm lane (trace.h). */
void strat_comm_done(strat_ctx *x, double t0, const char *what);
/* comm_wait, timed into comm_s and checked. A NULL request is a no-op. */
int strat_wait(strat_ctx *x, comm *c, comm_req *req, const char *what);

/* Held units in the order their backward completes (after(BACKWARD) hooks): units
 * descending, except that a chunk holding GPT's wte and its tied head finishes the
 * head last. Fills order[0..n) and returns n. */
int strat_backward_order(const strat_ctx *x, int *order);
/* Zeroes the gradient buffer each held unit is bound to. */
void strat_zero_unit_grads(strat_ctx *x);

/* ---- expert parallelism's units ----
 * Under parallel.ep > 1 an MoE block's unit holds this rank's routed experts
 * (their tensors, param_is_expert: one run [lo, hi) of its flat buffer)
 * beside its dense tensors (norms, attention, router, shared experts). The
 * experts are the same only on the ranks of the experts' data-parallel group
 * x->edp, so their gradients reduce over it; the dense tensors over x->dp as
 * in any unit (DDP's buckets keep the two apart). A sharded strategy shards
 * such an "expert unit" over x->edp, both parts: its dense part is then
 * repeated on the ranks of x->ep, which sum the dense part of their gradient
 * shards over x->ep once per step (strat_ep_dense_sum), after the
 * reduce-scatter over x->edp: together the sum over dp x cp. */
/* 1 when held unit `unit` holds experts split over ep ranks. */
int strat_expert_unit(const strat_ctx *x, int unit);
/* Its experts' elements [*lo, *hi) of the unit's flat buffer (empty: 0, 0). */
void strat_expert_range(const strat_ctx *x, int unit, size_t *lo, size_t *hi);
/* The group a unit's gradient shards, parameter gathers and updates run over:
 * x->edp for an expert unit, else `dense` (the strategy's shard group). */
comm *strat_unit_group(const strat_ctx *x, int unit, comm *dense);
/* Sharded strategies: every expert unit's gradient shard gshard[u] (elements
 * [lo[u], lo[u] + len[u]) of the unit, the gradient type) gets the dense
 * part of it summed over x->ep, in the reduce type (parallel.reduce_dtype). */
void strat_ep_dense_sum(strat_ctx *x, void *const *gshard, const size_t *lo, const size_t *len);
/* Who counts a slice's elements in the gradient norm and saves them in a
 * checkpoint (strat_ops.counts), for a strategy whose slices are the whole
 * unit replicated over the groups (sharded 0: DDP) or shards (1): the
 * experts once per experts' data-parallel group (DDP: its rank 0; sharded:
 * every rank, the shards are disjoint), the dense elements once per dp x cp
 * (DDP: rank 0; sharded: every rank, but an expert unit's dense shard only
 * on ep rank 0, the ep group repeating it). */
int strat_counts_rank(const strat_ctx *x, int sharded, int unit, int expert);

/* ---- element types ---- */
/* COMM_BF16 for 2-byte elements, else COMM_F32. */
comm_dtype strat_dtype(size_t elem_bytes);
/* n elements of src (se bytes each) into dst (de bytes each): a copy, or bf16
 * rounding / widening. */
void strat_convert(strat_ctx *x, void *dst, size_t de, const void *src, size_t se, size_t n);
/* acc (ae bytes each) += add (adde bytes each), n elements: fp32 adds, bf16
 * accumulators take one rounding; a bf16 addend is widened through `wide`
 * (wide_numel floats, used in pieces). */
void strat_accumulate(strat_ctx *x, void *acc, size_t ae, const void *add, size_t adde, size_t n, float *wide,
                      size_t wide_numel);
/* p + i elements of elem bytes. */
static inline void *strat_at(void *p, size_t i, size_t elem) { return (char *)p + i * elem; }

/* ---- the strategies ---- */

typedef struct dp_strategy dp_strategy; /* each file's own state */

/* The part of a unit this rank updates. Pointers are valid until the next hook. */
typedef struct {
    size_t lo, len;   /* elements [lo, lo + len) of the unit's flat buffer */
    void *param;      /* its parameters, element lo first (x->pe bytes each) */
    void *grad;       /* its synchronized gradients, element lo first (x->ge bytes each) */
} strat_slice;
/* frozen_slice and gather_frozen of a strategy that keeps the frozen base
 * whole in the model (DDP, ZeRO). */
void strat_frozen_whole_slice(strat_ctx *x, int unit, strat_slice *out);
void strat_frozen_whole_gather(strat_ctx *x, int unit, float *out);

typedef struct {
    const char *name;
    /* Called once the model's parameters are initialized in its own buffers: the
     * strategy takes over the units (may shard them and release the model's
     * buffers). NULL with one line in err on failure. */
    dp_strategy *(*create)(strat_ctx *x, char *err, size_t errlen);
    void (*destroy)(dp_strategy *s);
    /* Before the step's first micro-batch: gradients (or shards) to zero. */
    void (*begin_step)(dp_strategy *s);
    void (*before)(dp_strategy *s, int unit, model_phase phase);
    void (*after)(dp_strategy *s, int unit, model_phase phase);
    /* After the step's last backward: every slice's gradient is final. */
    void (*finish_grads)(dp_strategy *s);
    /* The slice of held unit `unit` this rank updates ([lo, lo+len) fixed for the run). */
    void (*slice)(dp_strategy *s, int unit, strat_slice *out);
    /* Does this rank count the elements of its slice of `unit` that are
     * routed experts (expert 1) or the rest (0) in the global gradient norm,
     * and save them in a checkpoint? Replicated copies (DDP's, HSDP's across
     * nodes, an expert unit's dense shard on the ep ranks) count on one rank
     * only (strat_counts_rank). */
    int (*counts)(dp_strategy *s, int unit, int expert);
    /* After AdamW updated the slices: every rank sees the new parameters (ZeRO
     * all-gathers them; FSDP forgets cached gathers). */
    void (*after_update)(dp_strategy *s);
    /* Forgets what the strategy remembers on the host between steps about
     * what its device buffers hold (FSDP: which unit each gather buffer
     * holds), without issuing anything: the state after_update leaves. For
     * train.cuda_graphs: a step that the device replays runs none of the
     * hooks on the host, so anything that ran between (an evaluation
     * filling FSDP's gather buffers) must not be believed by the next step
     * recorded or issued; every step then starts from this state, the one
     * its graph was recorded from. */
    void (*forget)(dp_strategy *s);
    /* The whole synchronized gradient of held unit `unit` (after finish_grads):
     * the strategy's own buffer when it keeps one (DDP, ZeRO-1), else gathered
     * from the shards into tmp (model_unit_local_numel gradient elements;
     * collective over the group the unit is sharded on). Writing into the
     * returned buffer writes the slice when it is not tmp. */
    void *(*full_grad)(dp_strategy *s, int unit, void *tmp);
    /* Collective over the data-parallel group: the whole tp-local parameters of held
     * unit `unit` into `out` as fp32 values (model_unit_local_numel floats, device
     * memory; bf16 parameters widened). */
    void (*gather_unit)(dp_strategy *s, int unit, float *out);
    /* train.lora: the part of held unit `unit`'s frozen base this rank holds
     * (grad NULL; fixed for the run): its whole frozen buffer, or FSDP's
     * shard of it. A load (model.init_from) writes it, then after_update
     * makes it every rank's view. */
    void (*frozen_slice)(dp_strategy *s, int unit, strat_slice *out);
    /* As gather_unit for the frozen base (model_unit_frozen_local_numel floats). */
    void (*gather_frozen)(dp_strategy *s, int unit, float *out);
} strat_ops;

extern const strat_ops strat_ddp;   /* ddp.c: buckets all-reduced during backward */
extern const strat_ops strat_zero1; /* zero.c: DDP's buckets + optimizer state sharded */
extern const strat_ops strat_zero2; /* zero.c: + gradients reduce-scattered into shards */
extern const strat_ops strat_fsdp;  /* fsdp.c: + parameters sharded (HSDP: ctx->replica) */

/* ---- tensor parallel (tp.c, tp.h) ---- */

/* Applies tensor parallelism to the model (torchtitan's parallelize): every
 * chunk computes its split layers through tp's (model_set_layers), over x->tp,
 * with sequence parallelism when sp. Their collectives' failures are recorded
 * in x (strat_fail). Under mixed precision it allocates the bf16 staging its
 * collectives go through (sizes_tp_stage_numel); -1: out of memory for it.
 * tp_release frees it (a no-op without one). */
int tp_apply(strat_ctx *x, int sp, model *const *chunks, int n_chunks);
void tp_release(strat_ctx *x);

/* ---- context parallel (cp.c, cp.h) ---- */

/* Applies context parallelism to the model: every chunk computes attention
 * through the ring over x->cp (model_set_attention), with buffers of
 * sizes_cp_ring_numel floats; -1: out of memory. cp_release frees them. */
int cp_apply(strat_ctx *x, model *const *chunks, int n_chunks);
void cp_release(strat_ctx *x);

/* ---- expert parallelism (ep.c) ----
 * With model.moe and parallel.ep > 1 every chunk's MoE blocks reach their
 * experts through ep.c's dispatcher (all-to-all over x->ep, staging of
 * sizes_ep_stage_numel floats); with cp > 1 the dispatcher (local without ep)
 * also gathers the counts the capacity and the balance loss need over x->cp.
 * A no-op otherwise. -1: out of memory. ep_release frees it. */
int ep_apply(strat_ctx *x, model *const *chunks, int n_chunks);
void ep_release(strat_ctx *x);
/* The experts' rows the dispatcher's staging holds room for now (it grows
 * to the most that arrived: ep.c ensure_room); 0 without ep. */
size_t ep_staged_rows(const strat_ctx *x);

/* ---- DDP's gradient buckets (ddp.c), also ZeRO-1's ---- */

typedef struct ddp_buckets ddp_buckets;
/* Buckets over the held units' gradients in backward order, each up to
 * sizes_bucket_numel elements (bucket_mb); a bucket that is one piece of one unit
 * is all-reduced in place, the others through the one bucket buffer. */
ddp_buckets *ddp_buckets_create(strat_ctx *x, char *err, size_t errlen);
void ddp_buckets_destroy(ddp_buckets *b);
/* A new step: no unit is ready. */
void ddp_buckets_reset(ddp_buckets *b);
/* Unit `unit`'s gradient is final for this step: launch (asynchronously) every
 * bucket that is now complete, in plan order. */
void ddp_buckets_unit_ready(ddp_buckets *b, int unit);
/* Launch what is left, wait for everything, copy the bucket buffer back. */
void ddp_buckets_finish(ddp_buckets *b);

/* ---- gradient reduce-scatter pool (grad_pool.c), ZeRO-2's and FSDP's ---- */

typedef struct grad_pool grad_pool;
/* nbuf full-unit gradient buffers of numel elements each (x->ge bytes, plus a
 * twin of x->re bytes when those differ). Unit u's gradient is reduce-scattered
 * (SUM, in the reduce type) over `group` and this rank's chunk, [lo[u], lo[u] +
 * len[u]), is added to shard[u] (device buffers of the gradient type the
 * caller owns). */
grad_pool *grad_pool_create(strat_ctx *x, comm *group, size_t numel, int nbuf, void *const *shard,
                            const size_t *lo, const size_t *len, char *err, size_t errlen);
/* The fp32 scratch a pool of numel-element buffers keeps to widen bf16 reduced
 * chunks (reduce element bytes re): 0 unless re is 2 (sizes.c counts it). */
size_t grad_pool_wide_numel(size_t numel, size_t re);
void grad_pool_destroy(grad_pool *p);
/* A zeroed buffer for unit u's gradient (before its backward); waits for the
 * oldest reduce-scatter in flight when every buffer is busy. */
void *grad_pool_acquire(grad_pool *p, int unit);
/* Unit u's backward is done: reduce-scatter its buffer, asynchronously. */
void grad_pool_release(grad_pool *p, int unit);
/* Wait for every reduce-scatter and add the chunks into the shards. */
void grad_pool_drain(grad_pool *p);

#endif
