/* model.h — the built-in GPT and ViT, described by parameter specs.
 *
 * The model knows nothing of parallelism (torchtitan's rule). It computes on the
 * local shards it is given and calls `model_hooks` at the points where a strategy
 * may act: before/after each unit in forward and backward (FSDP gathers and
 * frees, DDP buckets, ZeRO-2 reduce-scatters). The layers tensor parallelism
 * splits it computes through `model_layers`, which a tp strategy replaces with
 * its own (runtime/parallel/tp.c). It never calls the comm layer itself.
 *
 * Units. A model is a sequence of units: unit 0 = embedding (GPT: wte, wpe; ViT:
 * patch projection, class token, position embedding), units 1..L = transformer
 * blocks, unit L+1 = head (final layernorm + LM head tied to wte, or classifier).
 * Each unit's parameters live in one flat buffer (and its gradients in another),
 * so a strategy can gather, shard or reduce a unit with a single call. A `model`
 * object holds one contiguous range of units: the whole model on one rank, or a
 * pipeline stage (one per virtual stage with interleaving).
 *
 * Tensor parallelism (Megatron): qkv and fc are column-parallel (heads and ffn
 * columns split), attention proj and mlp proj row-parallel (bias added once, after
 * the reduction), wte vocab-parallel with a parallel cross-entropy; layernorms,
 * wpe, row-parallel biases and the ViT patch/classifier params are replicated
 * (their gradients come out identical on every tp rank). The model computes on
 * its shards; the collectives are the business of the tp layers (model_layers).
 *
 * Sequence parallelism (Megatron-LM's, shard.sp with tp > 1). The residual
 * stream, [N = B*seq, C] rows, is split by rows over the tp group: tp rank r
 * holds rows [r*N/tp, (r+1)*N/tp) of the stream, its gradient, and the block
 * boundaries a pipeline sends (model_acts_io_numel), and runs the per-token ops
 * (layernorms, residual adds) on those rows only. The tp layers gather a
 * column-parallel matmul's input first and reduce-scatter a row-parallel
 * matmul's partial sums instead of all-reducing them (backward: the mirror
 * image). The blocks keep their layernorm outputs and r2 for these rows only,
 * which is the memory SP saves. Layernorm gradients then come from a rank's rows
 * only: each unit has them summed over tp (model_layers.rows_grad_sum) before
 * its after(BACKWARD) hook, so gradients are complete and identical across tp
 * ranks there, as without SP.
 *
 * Layout independence: every parameter element is a pure function of (seed, name,
 * global index); a shard draws only its slice (param_global_index).
 *
 * The tied GPT LM head. Unit L+1 holds its own copy of wte (spec `tied` = 1, same
 * name, split and init as unit 0's), so each unit stays self-contained for FSDP
 * and pipeline stages. The two copies must receive the same total gradient so the
 * optimizer keeps them equal:
 *  - one model object holding units 0 and L+1 (pp = 1) does it itself: after each
 *    micro-batch's backward BOTH copies' grads hold the whole wte gradient
 *    (embedding part + LM-head part). Nothing else to do, except: count wte ONCE
 *    in the global gradient norm (skip params with tied = 1);
 *  - split across pipeline stages, the first stage's wte grad holds the embedding
 *    part and the last stage's copy the head part: the pipeline strategy must
 *    all-reduce (SUM) the two across first and last stage once per step, before
 *    clipping (Megatron's "embedding group"); the norm again counts wte once.
 * Initial values of the two copies are equal by construction.
 */
#ifndef DTRUN_MODEL_H
#define DTRUN_MODEL_H

#include <stddef.h>
#include "lib/job/jobspec.h"
#include "kernels/ops.h"
#include "runtime/model/lora.h"

#define PARAM_NAME_MAX 64

typedef enum {
    SPLIT_NONE = 0, /* replicated on every tp rank */
    SPLIT_ROWS,     /* dim 0 split (column-parallel out features, vocab rows);
                       split_groups > 1 splits each of that many equal row groups
                       separately (qkv: q, k and v each split by heads) */
    SPLIT_COLS      /* dim 1 split (row-parallel in features) */
} split_kind;
/* tp rank r of tp holds rows (or columns) [n*r/tp, n*(r+1)/tp) (floor): even for
 * heads and d_ff, uneven for a vocab of 50257. */

/* INIT_UNIFORM: uniform in [-init_std, init_std) (LoRA's A: PEFT's
 * kaiming_uniform_(a = sqrt(5)), whose bound is 1 / sqrt(fan_in)). */
typedef enum { INIT_NORMAL = 0, INIT_ZEROS, INIT_ONES, INIT_UNIFORM } init_kind;

typedef struct {
    char name[PARAM_NAME_MAX]; /* canonical: "wte", "h.3.attn.qkv.w", "lnf.b", ... */
    int ndim;                  /* 1 or 2 */
    int shape[2];              /* global shape; 1-D tensors have shape[1] = 1 */
    int local_shape[2];        /* on this tp rank */
    size_t local_numel;
    split_kind split;
    int split_groups;          /* 1, or 3 for qkv */
    int unit;                  /* which unit holds it */
    size_t offset;             /* element offset inside its unit's flat buffer */
    int decay;                 /* weight decay applies (2-D weights, not ViT's pos) */
    init_kind init;
    float init_std;            /* for INIT_NORMAL; INIT_UNIFORM's bound */
    int tied;                  /* 1 for the head's copy of wte (same name as unit 0's) */
    int tp_replicas;           /* 1, or (SPLIT_ROWS) the tp ranks holding the same rows: a
                                  Llama's k and v with tp above n_kv_head, each rank holding
                                  the kv head its query heads read (tp rank r holds part
                                  r / tp_replicas of tp / tp_replicas) */
    /* train.lora (lora.c): every tensor of the base model is frozen (no
     * gradient, no optimizer state; it lives in its unit's frozen buffer, and
     * `offset` counts there), the adapters (`lora` = 1) are what trains */
    int frozen;
    int lora;
    int ep_rank, ep_size;      /* the routed experts' tensors under expert parallelism
                                  (model_shard ep_size > 1): this rank holds the rows of
                                  experts [ep_rank E / ep_size, (ep_rank + 1) E / ep_size),
                                  part ep_rank of ep_size equal blocks of rows, within which
                                  the tp split applies as to the whole tensor (the block's
                                  E / ep_size row groups); 0 and 1 for every other tensor */
} param_spec;

/* 1 for a routed expert tensor split over expert-parallel ranks: its copies on
 * the ranks of one ep group differ (other experts), so its gradient reduces
 * (and a sharded strategy shards it) over the experts' data-parallel group. */
static inline int param_is_expert(const param_spec *p) { return p->ep_size > 1; }

/* 1 when tp rank tp_rank's copy of p repeats a lower rank's (replicated on
 * every rank and this is not rank 0, or a kv replica after the first): what
 * a checkpoint or the gradient norm must count once. */
static inline int param_tp_duplicate(const param_spec *p, int tp_rank)
{
    return (p->split == SPLIT_NONE && tp_rank != 0) || (p->tp_replicas > 1 && tp_rank % p->tp_replicas != 0);
}
/* The part of p tp rank r of tp holds, as a split over *parts: (r, tp), or
 * for replicated kv rows (r / tp_replicas, tp / tp_replicas). */
static inline void param_tp_part(const param_spec *p, int tp_rank, int tp_size, int *part, int *parts)
{
    int rep = p->tp_replicas > 1 ? p->tp_replicas : 1;
    *part = tp_rank / rep;
    *parts = tp_size / rep;
}

/* Which part of the model one object holds. */
typedef struct {
    int tp_rank, tp_size;
    int unit_begin, unit_end; /* [begin, end) of 0..L+1 */
    int sp;                   /* 1: sequence parallel over the tp group (no-op with tp 1);
                                 needs seq (model_seq_len) divisible by tp_size */
    int cp_rank, cp_size;     /* context parallelism (GPT): this rank holds the tokens of
                                 chunks model_cp_chunk(cp_rank, cp_size, 0 and 1) of every
                                 sample (cp_size 0 or 1: all of them); needs seq divisible
                                 by 2 * cp_size (and seq / cp_size by tp_size with sp) */
    int ep_rank, ep_size;     /* expert parallelism (model.moe, parallel.ep): this rank holds
                                 experts [ep_rank E / ep_size, (ep_rank + 1) E / ep_size) of
                                 every MoE block (ep_size 0 or 1: all of them); the tokens
                                 reach them through the MoE dispatcher (model_moe_dispatcher) */
} model_shard;

/* Context parallelism's causal load balancing (Megatron-Core, torchtitan):
 * each sample's seq tokens are cut into 2 cp chunks of seq / (2 cp); cp rank
 * r holds chunk r as the first half of its local sequence and chunk
 * 2cp - 1 - r as the second, so every rank has the same share of the causal
 * mask's work. */
static inline int model_cp_chunk(int cp_rank, int cp_size, int half)
{
    return half ? 2 * cp_size - 1 - cp_rank : cp_rank;
}

/* Host memory; the model copies it into device buffers of its activations.
 *
 * A step replayed as a graph (train.cuda_graphs, ops.h graph_begin) can
 * neither take the inputs from the host nor give the loss back in the
 * middle: with on_device the arrays are device memory (ops->alloc), copied
 * with ops->copy, and the backward's seed is made by ops->loss_seed from the
 * targets (labels) already on the device; with loss_sum (device memory) the
 * head adds the micro-batch's summed loss there (ops->loss_sum_add, the same
 * sum) and model_forward returns 0. Then a forward and backward read nothing
 * back to the host and take nothing from it. The pipeline executor's
 * micro-batches keep host arrays (a backward there may run after other
 * micro-batches' forwards overwrote the targets on the device). */
typedef struct {
    int B;                 /* samples in this micro-batch (<= the acts' capacity) */
    const int *tokens;     /* GPT: [B,T] inputs */
    const int *targets;    /* GPT: [B,T] next tokens */
    const float *images;   /* ViT: [B,ch,S,S] */
    const int *labels;     /* ViT: [B] */
    /* Packed samples (job_model.packed; else NULL), [B,T] like tokens, host
     * memory whatever on_device says: each token's position in its sample
     * (0 at a sample's first token: RoPE's or wpe's row) and its segment (its
     * sample's index in the row, never decreasing along it): a token attends
     * to its own segment's tokens only (model_docs). */
    const int *positions;
    const int *segments;
    int on_device;         /* 1: tokens, targets, images and labels are device memory */
    double *loss_sum;      /* device memory, or NULL: the loss comes back from model_forward
                              (with it, a ViT's correct count is not taken: it stays 0) */
    /* Training only (train.lora's dropout draws from them; 0, 0 in evaluation:
     * no dropout): the step (1-based) and where the micro-batch's first sample
     * sits in the step's global batch. */
    long step, sample0;
} model_batch;

typedef enum { PHASE_FORWARD = 0, PHASE_BACKWARD } model_phase;

typedef struct {
    void *ctx;
    /* Called around every unit's forward and backward (any may be NULL). In
     * backward, `after` means that unit's gradients are complete for this
     * micro-batch. Recompute re-runs a block's forward inside its backward
     * between before(BACKWARD) and after(BACKWARD); no forward hooks then.
     * Order: units ascending in forward, descending in backward, each unit's
     * hooks around its own compute — except that an object holding both wte
     * and the tied GPT head calls after(L+1, BACKWARD) last, right after
     * after(0, BACKWARD) (the embedding adds to the head's wte gradient). A
     * strategy may rebind a unit (model_unit_bind) inside before(); the model
     * re-reads a unit's buffers every time it uses them. */
    void (*before)(void *ctx, int unit, model_phase phase);
    void (*after)(void *ctx, int unit, model_phase phase);
} model_hooks;

/* The vocabulary-split LM head with its cross-entropy, on one micro-batch of
 * N = B * T token rows (the buffers are the model's activations).
 *
 * Chunked (llm.c's fused classifier, Liger's fused linear cross-entropy): the
 * [N, V_l] logits never exist at once. Forward computes them `rows` rows at a
 * time into one chunk buffer, reduces each chunk to its rows' statistics
 * (rowmax, sumexp, target: all the loss and its gradient need) in one read of
 * it (ops->xent_stats, an online softmax sum) and drops it.
 * Backward computes each chunk's logits again (model_vocab_head_logits: the
 * same GEMM on the same rows, so the same values the statistics came from),
 * turns them into their gradient in place and accumulates d(x) and d(wte)
 * from it, chunk by chunk. So the head keeps [N] statistics and one
 * [rows, V_l] chunk instead of [N, V_l] logits, for one more forward GEMM of
 * the head in backward (2 N C V_l FLOPs: model_exec_flops_per_sample).
 *
 * Why recompute and not the gradient in forward (Liger's way, which skips
 * the second GEMM): the gradient's scale (model_backward's loss_scale, 1 /
 * the global count of tokens) arrives only with backward, weight gradients
 * may only be written between a unit's before(BACKWARD) and after(BACKWARD)
 * hooks (FSDP and ZeRO-2 bind the gradient buffers there), a pipeline runs
 * other micro-batches' forwards before this one's backward, and eval and
 * generation run the forward alone: a gradient made in forward would need its
 * own [V_l, C] and [N, C] per micro-batch in flight, or be wasted. */
typedef struct {
    int B, T, C;
    int v0, V_l;            /* this rank's vocabulary rows [v0, v0 + V_l) of wte */
    int rows;               /* rows per chunk (model_head_chunk_rows); the last may be short */
    const void *wte;        /* [V_l, C] of type t (a weight matrix: ops.h) */
    float *dwte;            /* [V_l, C] backward: accumulates */
    dt_dtype t;             /* x's type (the run's activations) */
    const void *x_rows;     /* the final layernorm's output: this rank's rows of x */
    void *x;                /* [N, C] all of it (forward fills it from x_rows; x_rows
                               is x itself, or its part, without sequence parallelism) */
    const int *targets;     /* [N] (< 0: no loss) */
    float *logits;          /* [min(rows, N), V_l] one chunk's logits; in backward,
                               in place, their gradient */
    float *rowmax, *sumexp, *target, *loss; /* [N]; loss is written last (a tp
                               head keeps its ranks' own maxima there until then) */
    const float *dloss;     /* [N] backward: dL/d(loss) per token */
    float *dx;              /* [N, C] backward: d(x) (zeroed first) */
} model_vocab_head;

/* Rows of logits the GPT head computes at a time: model.head_chunk_rows, or
 * by default MODEL_HEAD_CHUNK_ROWS. The same on every tp rank and in every
 * layout (it depends on neither V_l nor the batch): the ranks of a tp group
 * reduce the same chunks, and every layout sums d(wte) in the same groups. */
#define MODEL_HEAD_CHUNK_ROWS 1024
int model_head_chunk_rows(const job_model *spec);
/* Logits rows [r0, r0 + n) of the head into h->logits ([n, V_l]): the one GEMM
 * the forward and the backward's recompute share. */
void model_vocab_head_logits(const dt_ops *ops, const model_vocab_head *h, int r0, int n);
/* The forward on this rank's vocabulary columns, chunk by chunk: each row's
 * max, sum of exponentials and target logit into h->rowmax, h->sumexp,
 * h->target (xent_stats). A tensor-parallel head combines them over its
 * group; one rank computes the loss from them directly. */
void model_vocab_head_stats_local(const dt_ops *ops, const model_vocab_head *h);
/* The head's backward on this rank's vocabulary columns, chunk by chunk: h->dx
 * zeroed, then d(x) (this rank's part of the sum over the vocabulary) into it
 * and d(wte) into h->dwte. A tensor-parallel head sums h->dx over its group. */
void model_vocab_head_backward_local(const dt_ops *ops, const model_vocab_head *h);

/* The layers tensor parallelism splits (Megatron-LM's ColumnParallelLinear,
 * RowParallelLinear, VocabParallelEmbedding and vocab-parallel cross-entropy),
 * through which the model computes them. By default they are the plain local
 * layers (one tp rank: no communication); a tensor-parallel strategy sets its own
 * (runtime/parallel/tp.h), which do the same local ops plus the collectives
 * their kind needs. The model only passes its local shards and buffers.
 *
 * Rows: a [N, C] tensor of the residual stream, N = B * T. With sequence
 * parallelism (model_shard.sp) the model holds this rank's rows of it (`*_rows`,
 * rows_local of the N) and passes `full`, a [N, C] scratch a layer gathers into
 * or reduces from; without it `*_rows` are all N rows and `full` may be NULL.
 * Linear layers compute out[N, OC] = in[N, IC] w^T + b (ops->matmul_forward)
 * with this rank's w [OC, IC] and b [OC]; backward accumulates dw, db.
 * Types (ops.h): the activations (the layers' inputs, a column layer's
 * output and GELU) are of type t, the run's; gradients and a row layer's
 * output (summed over the group before anything keeps it) are fp32. `full`
 * holds whichever its use gathers or sums (t or fp32: sized for fp32). The
 * weight matrices w are of type t (the bf16 parameters under mixed
 * precision), the biases fp32. */
typedef struct {
    void *ctx;
    /* Column-parallel (OC: this rank's output features): in gathered from
     * in_rows, out local. lora (train.lora, lora.h): the layer's adapters, or
     * NULL (the four linear layers take one; the fused GELU ones never: the
     * model runs an adapted layer unfused). */
    void (*column_forward)(void *ctx, void *out, const void *in_rows, void *full, const void *w,
                           const float *b, int N, int IC, int OC, dt_dtype t, const model_lora *lora);
    /* column_forward, then act = GELU (tanh approximation) of out, fused
     * where the backend fuses them (ops->matmul_gelu_forward). */
    void (*column_gelu_forward)(void *ctx, void *act, void *out, const void *in_rows, void *full,
                                const void *w, const float *b, int N, int IC, int OC, dt_dtype t);
    /* din [N, IC] is zeroed and receives the input gradient summed over the tp
     * group; returns this rank's rows of it (din itself without SP). in_rows are
     * gathered into full again when they are rows. */
    const float *(*column_backward)(void *ctx, float *din, float *dw, float *db, const float *dout,
                                    const void *in_rows, void *full, const void *w, int N, int IC,
                                    int OC, dt_dtype t, const model_lora *lora);
    /* Row-parallel (IC: this rank's input features): the sum over the group of
     * the local products, b added once, into this rank's rows out_rows. */
    void (*row_forward)(void *ctx, float *out_rows, void *full, const void *in, const void *w,
                        const float *b, int N, int IC, int OC, dt_dtype t, const model_lora *lora);
    /* dout_rows gathered (into full) when they are rows; din [N, IC] is zeroed
     * and receives this rank's input gradient. */
    void (*row_backward)(void *ctx, float *din, float *dw, float *db, const float *dout_rows,
                         void *full, const void *in, const void *w, int N, int IC, int OC, dt_dtype t,
                         const model_lora *lora);
    /* row_backward of a layer whose input is gelu_tanh(pre), its input
     * gradient taken through the GELU: dpre [N, IC] = din * gelu'(pre)
     * (overwritten), fused where the backend fuses them
     * (ops->matmul_dgelu_backward); scratch: [N, IC] floats, overwritten. */
    void (*row_dgelu_backward)(void *ctx, float *dpre, float *scratch, float *dw, float *db,
                               const float *dout_rows, void *full, const void *in, const void *w,
                               const void *pre, int N, int IC, int OC, dt_dtype t);
    /* Vocabulary-split token embedding plus position embedding wpe [T, C]:
     * out_rows = this rank's rows of wte[tokens] + wpe (wte: rows [v0, v0+V_l)).
     * wpe NULL (a Llama: rotary positions): no position embedding; in
     * backward dwpe NULL likewise. pos NULL: row t of a sample takes wpe's
     * row t; else ([B*T] device ints) row n takes wpe's row pos[n] (packed
     * samples; ops.h posadd_*). */
    void (*embedding_forward)(void *ctx, float *out_rows, void *full, const int *tokens,
                              const float *wte, const float *wpe, const int *pos, int v0, int V_l, int B, int T,
                              int C);
    void (*embedding_backward)(void *ctx, float *dwte, float *dwpe, const float *dout_rows,
                               void *full, const int *tokens, const int *pos, int v0, int V_l, int B, int T, int C);
    /* The LM head's logits and the cross-entropy's per-token loss (h->loss),
     * chunk by chunk (model_vocab_head), keeping the rows' statistics. */
    void (*head_forward)(void *ctx, const model_vocab_head *h);
    /* d(x) summed over the group into h->dx; returns this rank's rows of it. */
    const float *(*head_backward)(void *ctx, const model_vocab_head *h);
    /* The whole [N, C] tensor of type t from this rank's rows: rows itself,
     * or gathered into full (returned) under sequence parallelism. */
    const void *(*rows_gather)(void *ctx, const void *rows, void *full, size_t NC, dt_dtype t);
    /* A gradient each rank computed a part of, n floats, summed over the
     * group in place: a replicated tensor's under sequence parallelism (from
     * this rank's rows), a Llama's kv heads replicated above n_kv_head (from
     * this rank's query heads; model_kv_grads_sum). */
    void (*rows_grad_sum)(void *ctx, float *buf, size_t n);
    /* A row-parallel layer's sum without its GEMM: out_rows = this rank's
     * rows of the sum over the group of the [N, C] fp32 partial (nc = N C
     * floats; used up): all-reduced, or reduce-scattered under sequence
     * parallelism. out_rows may be partial itself (without SP) or its own
     * rows within it (rows_first). The MoE layer sums its experts' and
     * shared experts' partial outputs (and their input gradients) with it. */
    void (*partial_sum)(void *ctx, float *out_rows, float *partial, size_t nc);
} model_layers;

/* The document mask of packed samples (model_batch.segments): the segment
 * id of every row of every cp rank's local sequence, [cp][B][T] rank after
 * rank in each rank's own row order (model_cp_chunk's two chunks: without
 * context parallelism simply [B][T]), on the device (seg) and on the host
 * (seg_host, the same ids). A query row attends to the keys of its own
 * segment only (ops.h attention_block_*'s segment ids); within one chunk of
 * a sample the ids never decrease. */
typedef struct {
    const int *seg;
    const int *seg_host;
} model_docs;

/* The attention core of every block (qkv in, the heads' outputs out), through
 * which the model computes it: by default the local one on this rank's tokens
 * (local_layers.c: model.attention fused, the blockwise ops->attention_block_*
 * over one block of every key, or naive, ops->attention_forward / _backward);
 * a context-parallel strategy sets its own (runtime/parallel/cp.c), which
 * runs the ring over its cp group so that the local queries see every rank's
 * keys. qkv [B, T, W] (W = dt_qkv_cols(C, NH, NKV): q, then k and v of NKV
 * key/value heads; 3C without GQA), out [B, T, C] with T the local sequence
 * (model_dims' seq), C, NH and NKV this tp rank's (GQA: query head h reads kv
 * head h / (NH / NKV), ops.h).
 * stat is what forward keeps for backward: the rows' log-sum-exp [B, NH, T]
 * when model_attention_lse (fused, or context parallelism), else the softmax
 * probabilities [B, NH, T, T]. docs: the document mask of packed samples,
 * or NULL (only the causal one; a naive attention takes none). scratch
 * (forward and backward, shared by all
 * blocks): fused without cp [B * T, 2 dt_kv_cols] floats (k and v packed for
 * the blockwise ops, then their gradient: 4C without GQA), naive [B, NH, T, T]
 * (backward only),
 * NULL under context parallelism (the ring brings its own).
 * qkv and out are activations of type t (ops.h); so are naive's
 * probabilities; the log-sum-exp is fp32. */
typedef struct {
    void *ctx;
    void (*forward)(void *ctx, void *out, void *stat, float *scratch, const void *qkv, const model_docs *docs,
                    int B, int T, int C, int NH, int NKV, int causal, dt_dtype t);
    /* dqkv += */
    void (*backward)(void *ctx, float *dqkv, float *scratch, const float *dout, const void *qkv,
                     const void *out, const void *stat, const model_docs *docs, int B, int T, int C, int NH,
                     int NKV, int causal, dt_dtype t);
} model_attention;

/* ---- mixture of experts (model.moe; moe.c) ----
 * An MoE block's MLP is Megatron-Core's three parts: the router (scores
 * each token's experts, fp32, and picks top_k), the token dispatcher (moves
 * each kept choice's row to its expert and the experts' outputs back,
 * weighted), and the experts (one grouped GEMM over their sorted rows). The
 * dispatcher is the part expert parallelism replaces (its all-to-all moves
 * rows between ranks); the model computes through this table, by default
 * the local one (local_layers.c: ops->moe_permute / moe_unpermute), and never
 * communicates itself.
 *
 * The route of one micro-batch (ops.h moe_route): N token rows, k choices
 * each; dst [N, k] each choice's row in the permuted order (-1: dropped by
 * the capacity), src [M] each permuted row's token row, counts [E] (host
 * memory) the rows of each expert, expert by expert, M their sum.
 * counts_l (host) is what dispatch records for the rest of the layer (the
 * combine, the backward): [El] the rows each of this rank's El experts
 * computes, then [ep][El] the rows each rank of its ep group sends each of
 * them (the local dispatcher: El = E, the first part only). */
typedef struct {
    int N, k, E, El;
    const int *dst, *src; /* device */
    const int *counts;    /* host */
    int *counts_l;        /* host, [El + E] */
} model_moe_route;

typedef struct {
    void *ctx;
    /* 0: the local dispatcher: this rank's experts compute exactly its
     * permuted rows, so their output rows ARE the token side's (combine's ye
     * and yt are one buffer). 1: rows move between ranks (expert
     * parallelism): ye and yt are different buffers. */
    int moves_rows;
    /* xe [M_l, C] (type t): the rows this rank's El experts compute, expert
     * by expert, from x [N, C] (type t); writes r->counts_l. Returns M_l.
     * Local: every expert, xe = x's rows in src order. */
    int (*dispatch)(void *ctx, void *xe, const void *x, const model_moe_route *r, int C, dt_dtype t);
    /* yt [M, C] (type t; kept for the backward) = the experts' output rows
     * of this rank's kept choices in the permuted order, from ye [M_l, C]
     * (this rank's experts' outputs, dispatch's order); then, unless out is
     * NULL (a block recompute's forward), out [N, C] fp32 (accumulate: +=,
     * else overwritten) = each row's kept choices' yt rows times their
     * weights w [N, k] (fp32), in choice order. */
    void (*combine)(void *ctx, float *out, void *yt, const void *ye, const float *w, const model_moe_route *r,
                    int C, dt_dtype t, int accumulate);
    /* Its backward: dye [M_l, C] (fp32, overwritten; this rank's experts'
     * output gradient) from w dout of each choice's row; dw [N, k] +=
     * dot(dout row, its yt row). */
    void (*combine_backward)(void *ctx, float *dye, float *dw, const float *dout, const void *yt, const float *w,
                             const model_moe_route *r, int C, dt_dtype t);
    /* dispatch's backward: dx [N, C] += the gradient of every kept choice's
     * row, from dxe [M_l, C] (fp32, this rank's experts' input gradient; may
     * be overwritten), each row's choices in order. */
    void (*dispatch_backward)(void *ctx, float *dx, float *dxe, const model_moe_route *r, int C);
    /* Optional (NULL: none), the first halves of the four calls above, with
     * their arguments: the exchange is started, the model computes what does
     * not depend on it (the shared experts, the router's weight gradient)
     * while the rows travel, then makes the call itself, which finishes it
     * (without a start the call does both halves). One at a time. */
    void (*dispatch_start)(void *ctx, const void *x, const model_moe_route *r, int C, dt_dtype t);
    void (*combine_start)(void *ctx, void *yt, const void *ye, const model_moe_route *r, int C, dt_dtype t);
    void (*combine_backward_start)(void *ctx, float *dw, const float *dout, const void *yt, const float *w,
                                   const model_moe_route *r, int C, dt_dtype t);
    void (*dispatch_backward_start)(void *ctx, float *dxe, const model_moe_route *r, int C);
    /* Context parallelism (a sample's tokens on cp ranks): all [cp][n] =
     * every cp rank's `mine` [n], in cp rank order (the capacity and the
     * balance loss count a sample's tokens on every rank). NULL with cp 1. */
    void *cp_ctx;
    void (*cp_gather)(void *cp_ctx, float *all, const float *mine, size_t n);
} model_moe_dispatcher;

/* What the training forwards of one MoE block routed since the last
 * model_moe_stats_reset (host): per expert the choices that picked it
 * (chosen[E], before any capacity drop: its load), the choices dropped, and
 * the sum over the samples of the Switch/GShard balance loss E sum_e f_e P_e
 * (model.moe.aux_loss_coef: 1 when balanced). A block recompute's second
 * forward counts nothing. */
typedef struct {
    int layer;      /* the block's index, 0-based */
    double *chosen; /* [E] */
    double dropped;
    double aux;
} model_moe_stats;

/* What the model computes in (train.precision, train.grad_dtype). fp32: every
 * tensor fp32. bf16 (mixed precision): compute weights and the activations kept
 * for backward are bf16; layernorm, softmax and loss statistics and every
 * matmul's accumulation stay fp32; gradients are bf16 or fp32 (grad_bf16). The
 * fp32 master weights are the optimizer's, not the model's.
 *
 * How the weights and gradients are held under bf16: each unit's parameter
 * buffer holds bf16 values. When the model computes a unit (after its
 * before() hook, so after any rebinding) it widens them into one fp32 working
 * copy the size of the largest unit, which the unit's tensors then point into
 * (the vectors and embeddings the ops read in fp32); the GEMMs read the weight
 * matrices as the bf16 parameters themselves (model_internal.h unit_weight),
 * and the activations are bf16 too (ops.h dt_dtype); the kernels compute in
 * fp32 (or bf16 products with fp32 accumulation) from those exact bf16
 * values. With bf16 gradients the
 * unit's backward accumulates its micro-batch gradient into an fp32 working
 * gradient (zeroed first), folded into the unit's bf16 gradients with one
 * rounding (acc_bf16) before its after(BACKWARD) hook: across micro-batches
 * the gradient accumulates in bf16. With fp32 gradients (grad_bf16 = 0,
 * Megatron's fp32 main_grad) the backward accumulates into them directly. */
typedef struct {
    int bf16;      /* 1: mixed precision */
    int grad_bf16; /* 1: gradients accumulate in bf16 (needs bf16) */
    /* 1: train.offload: activations (with block recompute): the stream entering
     * blocks 1 .. n-1 of the object, what block recompute keeps of them, lives
     * in host memory (ops->host_alloc). Each block's output crosses to the
     * host after its forward and back before its backward's recompute; the
     * object's input (a pipeline receives it) and output stay. Same values,
     * so the same run. */
    int acts_on_host;
} model_precision;

typedef struct model model;
typedef struct model_acts model_acts;

/* ---- sizes: the one source of truth for the runtime and --dry-run ---- */
int model_n_units(const job_model *spec);                    /* L + 2 */
/* 1 when the attention core keeps each row's log-sum-exp instead of the
 * softmax probabilities: model.attention fused, or context parallelism
 * (cp_size > 1: the ring is blockwise whatever the key says). Then no [seq,
 * seq] matrix is kept or used as scratch, and selective recompute has nothing
 * to drop or redo (it is the same as none). */
static inline int model_attention_lse(const job_model *spec, int cp_size)
{
    return spec->attention == ATTN_FUSED || cp_size > 1;
}
/* Key/value heads one tp rank of tp computes with: n_kv_head / tp, or 1 when
 * tp is above n_kv_head (each rank the one its query heads read); the query
 * heads' n_head / tp for a GPT or ViT. */
static inline int model_kv_heads_local(const job_model *spec, int tp)
{
    int kv = job_model_kv_heads(spec);
    return kv >= tp ? kv / tp : 1;
}
/* Number of parameter tensors of a unit, and their specs for a tp rank. */
int model_unit_param_count(const job_model *spec, int unit);
void model_unit_param_spec(const job_model *spec, int unit, int i, int tp_rank, int tp_size,
                           param_spec *out);
/* Elements of the unit's flat buffer: its trainable tensors (all of them,
 * unless train.lora freezes the base), and of its frozen buffer (train.lora:
 * the base model's tensors; else 0). A frozen buffer has no gradient and no
 * optimizer state: strategies shard it (FSDP) or keep it whole, never reduce it. */
size_t model_unit_numel(const job_model *spec, int unit, int tp_rank, int tp_size);
size_t model_unit_frozen_numel(const job_model *spec, int unit, int tp_rank, int tp_size);
/* The same on ep rank ep_rank of ep_size (model_shard: expert parallelism):
 * an MoE block's routed experts' tensors hold that rank's experts only. */
void model_unit_param_spec_ep(const job_model *spec, int unit, int i, int tp_rank, int tp_size, int ep_rank,
                              int ep_size, param_spec *out);
size_t model_unit_numel_ep(const job_model *spec, int unit, int tp_rank, int tp_size, int ep_size);
/* Of model_unit_numel, the routed experts' tensors (model.moe: every
 * expert's rows of the stacked expert matrices, all E of them): what
 * expert parallelism splits over ep ranks (each holds E / ep experts' rows)
 * and reduces over the experts' data-parallel group. 0 for a unit that is
 * not an MoE block. */
size_t model_unit_expert_numel(const job_model *spec, int unit, int tp_rank, int tp_size);
/* Tokens (GPT: T) or patches + class token (ViT: NP + 1) per sample. */
int model_seq_len(const job_model *spec);
/* Bytes of activations one micro-batch of B samples keeps between forward and
 * backward on this shard (with recompute = block only block inputs; with
 * selective and naive attention one set of attention probabilities for all
 * blocks), plus the scratch it needs; model_acts_create allocates exactly
 * this, in one ops->alloc (besides a few host floats per token for the loss). */
size_t model_acts_bytes(const job_model *spec, const model_shard *shard, int B,
                        recompute_kind recompute);
/* The two parts of those bytes. stash: what one micro-batch keeps from its
 * forward for its backward (per model_acts; a pipeline stage holds one per
 * micro-batch in flight); work: the working set one model object shares among
 * all its micro-batches (backward scratch, recompute buffers, sequence-parallel
 * gathers), allocated with its first model_acts. prec NULL: fp32. Under bf16
 * the stash's tensors are 2 bytes per element (statistics, logits and losses 4). */
typedef struct {
    size_t stash, work, host; /* host: the stash's part in host memory (acts_on_host) */
    size_t scratch; /* of work, what lives only inside one forward or backward
                       call, which the chunks of a pipeline rank may share
                       (model_share_scratch); the rest is the model's own */
} model_acts_size;
model_acts_size model_acts_sizes(const job_model *spec, const model_shard *shard, int B,
                                 recompute_kind recompute, const model_precision *prec);
/* Of the work bytes, the GPT head's chunk of logits (model_vocab_head), as
 * allocated: 0 on a shard without the GPT head. */
size_t model_acts_head_chunk_bytes(const job_model *spec, const model_shard *shard, int B);
/* Host bytes model_acts_create mallocs next to those (per-token loss and its
 * gradient; ViT: the logits too): host memory on a GPU, the same memory on the
 * CPU backend. */
size_t model_acts_host_bytes(const job_model *spec, int B);
/* model.mla (multi-head latent attention): the matmul weights a token passes
 * through before the attention core (the query's and the keys' and
 * values' down and up projections) and after it (the output), for the
 * FLOPs; and the width the attention core's products run over, what
 * d_model is for multi-head attention: QK^T and AV each 2 x seq^2 x width
 * forward (model.mla: n_head x (qk_nope + qk_rope + v head dims) / 2). */
void model_mla_weights(const job_model *spec, double *in, double *out);
double model_attention_width(const job_model *spec);
/* NULL when the model computes what spec describes; else why not, one line
 * for the user ("attention mla: counted by --dry-run, not trained yet"):
 * what the dry-run prices but training refuses before anything starts
 * (runtime/train/preflight.c, the worker's engine). */
const char *model_unsupported(const job_model *spec);
/* FLOPs of forward + backward for one sample on the whole model:
 * 6 * sum(matmul weights * rows per sample) + 12 * L * seq^2 * d_model (attention;
 * Llama: GQA's smaller k and v, SwiGLU's three MLP matrices, the untied head);
 * block recompute adds the blocks' forward up to the MLP projection, selective
 * with naive attention their attention core (4 * L * seq^2 * d_model; with
 * fused attention nothing). Details: params.c. */
double model_flops_per_sample(const job_model *spec, recompute_kind recompute);
/* Its share of one unit (0: embedding, 1..L: a block, L + 1: head); the sum
 * over the units is model_flops_per_sample. */
double model_unit_flops(const job_model *spec, int unit, recompute_kind recompute);
/* What a step executes per sample: model_flops_per_sample plus, for a GPT, the
 * LM head's forward GEMM once more in backward (the chunked head recomputes
 * its logits whatever train.recompute says): 2 * seq * V * d_model. The
 * model FLOPs of MFU leave it out, as they leave out every recompute. */
double model_exec_flops_per_sample(const job_model *spec, recompute_kind recompute);
/* Global index of local element i of a parameter (for init, gathers, checkpoints). */
size_t param_global_index(const param_spec *p, int tp_rank, int tp_size, size_t i);


/* ---- the model object ---- */
model *model_create(const job_model *spec, const model_shard *shard, const dt_ops *ops,
                    recompute_kind recompute);
/* The same with a precision (NULL: fp32). */
model *model_create_prec(const job_model *spec, const model_shard *shard, const dt_ops *ops,
                         recompute_kind recompute, const model_precision *prec);
const model_precision *model_get_precision(const model *m);
void model_destroy(model *m);
const model_shard *model_get_shard(const model *m);
const job_model *model_get_spec(const model *m);

/* Parameters: flat per unit; grads likewise (zeroed by model_zero_grads).
 * Elements are model_param_elem_bytes / model_grad_elem_bytes wide: fp32 (4),
 * or under mixed precision bf16 (2, uint16_t) parameters and bf16 or fp32
 * gradients (train.grad_dtype). Buffers a strategy binds have the same types. */
void *model_unit_params(model *m, int unit);
void *model_unit_grads(model *m, int unit);
size_t model_unit_local_numel(const model *m, int unit);
size_t model_param_elem_bytes(const model *m); /* 4, or 2 under bf16 */
size_t model_grad_elem_bytes(const model *m);  /* 4, or 2 with bf16 gradients */
/* Point a unit at other buffers (FSDP's gathered buffer); NULL keeps the current. */
void model_unit_bind(model *m, int unit, void *params, void *grads);
/* Free the unit's own param and grad buffers (a strategy that binds its own, e.g.
 * FSDP, so the full unit is not held twice); the unit must be bound again before
 * it is used. model_unit_params/grads return NULL until then. */
void model_unit_release(model *m, int unit);
/* train.lora: the unit's frozen buffer (model_unit_frozen_numel elements of
 * the parameter type; NULL when it has none, or after release), its size,
 * binding another (FSDP's gathered one; NULL keeps the current) and freeing
 * the model's own, as the three above do for the trainable buffer. */
void *model_unit_frozen(model *m, int unit);
size_t model_unit_frozen_local_numel(const model *m, int unit);
void model_unit_bind_frozen(model *m, int unit, void *frozen);
void model_unit_release_frozen(model *m, int unit);
int model_param_count(const model *m);          /* over the units held */
const param_spec *model_param(const model *m, int i);
/* Tensor i's elements in its unit's current buffers (element types as above). */
void *model_param_data(model *m, int i);
void *model_param_grad(model *m, int i);

/* Draw every local element from (seed, name, global index); under bf16 the
 * parameters are the bf16 rounding of those fp32 draws. */
void model_init_params(model *m, unsigned long long seed);
/* The same draw of one tensor's shard (tp_rank of tp_size) into host floats:
 * what a run without model.init_from starts p from (train.lora's export
 * rebuilds such a frozen base from its checkpoint's seed). */
void model_init_tensor(const param_spec *p, int tp_rank, int tp_size, unsigned long long seed, float *out);
/* The fp32 initial values of elements [lo, hi) of held unit `unit`, into host
 * memory out (hi - lo floats): what the optimizer's fp32 master starts from
 * under mixed precision (the bf16 parameters are their rounding). */
void model_init_unit_slice(const model *m, int unit, size_t lo, size_t hi, unsigned long long seed,
                           float *out);
/* Bytes of the fp32 working copies a bf16 model computes from (the widened
 * parameters of the unit being computed, its fp32 micro-batch gradient with
 * bf16 gradients): 0 in fp32. Allocated once by model_create_prec. */
size_t model_mixed_work_bytes(const model *m);
/* The chunks of one pipeline rank compute one unit at a time, so they need
 * one set of fp32 working copies, not one each: makes the n models share the
 * largest one's (freeing the others'; each model_mixed_work_bytes then says
 * the shared set's size, to be counted once). A no-op in fp32; -1 when the
 * models differ in backend or gradient type (nothing changed). */
int model_share_mixed_work(model *const *ms, int n);
void model_zero_grads(model *m);
void model_set_hooks(model *m, const model_hooks *hooks);
/* The layers tensor parallelism splits (NULL: the plain local ones, the
 * default). A model with tp_size > 1 must be given them before it computes. */
void model_set_layers(model *m, const model_layers *layers);
/* The attention core (NULL: the local one, the default). A model with
 * cp_size > 1 must be given a context-parallel one before it computes. */
void model_set_attention(model *m, const model_attention *attention);

/* The MoE token dispatcher (NULL: the local one, the default). */
void model_set_moe_dispatcher(model *m, const model_moe_dispatcher *dispatcher);
/* The local one (every expert on this rank, nothing moves; ctx is m): what a
 * strategy starts from when it adds only cp_gather. */
void model_local_moe_dispatcher(model *m, model_moe_dispatcher *out);
/* Memory the model sizes while it computes (an MoE block's experts' rows, as
 * many as arrive: moe.c) is told to observer(ctx, bytes): > 0 allocated,
 * < 0 freed; NULL: nobody. */
void model_set_mem_observer(model *m, void (*observer)(void *ctx, long long bytes), void *ctx);
/* The fewest and the most rows that arrived at one MoE block's experts on
 * this rank in one micro-batch, over the forwards so far (0, 0 before any). */
void model_moe_rows(const model *m, int *fewest, int *most);
/* model.moe: what follows the routing (moe.c) for `rows` rows arriving at
 * every MoE block's experts in every micro-batch: each micro-batch's stash
 * holds its MoE blocks' experts' rows until their backward (none under block
 * recompute), the working set one block's gradients of them (and under block
 * recompute its rows); host 0. Added to model_acts_sizes, which leaves them
 * out: the engine allocates them as they arrive. */
model_acts_size model_moe_rows_sizes(const job_model *spec, const model_shard *shard, int B,
                                     recompute_kind recompute, const model_precision *prec, size_t rows);
/* MoE blocks this object holds, and their statistics (model_moe_stats, i <
 * model_moe_count, in block order). */
int model_moe_count(const model *m);
const model_moe_stats *model_moe_stats_of(const model *m, int i);
void model_moe_stats_reset(model *m);
/* DeepSeek-V3's auxiliary-loss-free balancing of held MoE block i: each
 * expert's routing bias moves by rate * sign(mean load - its load), load[E]
 * the step's global choices per expert (the same numbers on every rank, so
 * the same biases). The bias is added to the scores for choosing the experts
 * only. get / set: its [E] values (host), what a checkpoint saves
 * ("state/h.N.moe.bias"). */
void model_moe_bias_update(model *m, int i, const double *load, double rate);
void model_moe_bias_get(const model *m, int i, float *out);
void model_moe_bias_set(model *m, int i, const float *in);

/* ---- activations of one micro-batch ---- */
model_acts *model_acts_create(model *m, int B);
void model_acts_destroy(model_acts *a);
/* The residual stream entering / leaving this shard, [B, seq, d_model] (with
 * sequence parallelism this tp rank's rows of it, 1/tp of them): a
 * pipeline engine receives into input (stages without the embedding) and sends
 * output (stages without the head); in backward it receives into doutput and
 * sends dinput. doutput is NULL on a stage with the head (nothing arrives). Sizes
 * are the capacity B given to model_acts_create; a smaller batch uses a prefix. */
void *model_acts_input(model_acts *a);
void *model_acts_output(model_acts *a);
void *model_acts_dinput(model_acts *a);
void *model_acts_doutput(model_acts *a);
size_t model_acts_io_numel(const model *m, int B);
/* Bytes of the stash this micro-batch's blocks keep as inputs of attention
 * (the ln1 output and qkv) and of the MLP (the ln2 output, fc's output before
 * and after GELU), as allocated: what context parallelism (1 / cp of them) and
 * sequence parallelism (the layernorm outputs' 1 / tp) cut. 0 and 0 when the
 * blocks keep no set (block recompute). */
void model_acts_kept(const model_acts *a, size_t *attn_in, size_t *mlp_in);
/* Bytes per element of those four: 4 (fp32), or 2 under bf16 (COMM_BF16 on the wire). */
size_t model_acts_io_elem_size(const model *m);
/* Bytes of the working set the model's activations share (0 before the first
 * model_acts_create): its own part; and its scratch part, maybe shared with
 * other models (count it once for all of them). */
size_t model_acts_work_bytes(const model *m);
size_t model_acts_scratch_bytes(const model *m);
/* The chunks of a pipeline rank compute one at a time: they can share one
 * scratch (model_acts_size.scratch), the largest of theirs (the others' are
 * freed). Call once their activations exist; a model whose micro-batches
 * later grow past it gets its own again. 0, or -1 (different backends). */
int model_share_scratch(model *const *ms, int n);
/* A pipeline rank's micro-batches of all its chunks may share one pool of
 * stash buffers (pp_exec.h): activations created without a stash
 * (model_acts_create_unbound) take a buffer of at least
 * model_acts_stash_bytes(m, B) from the pool when a micro-batch starts on
 * them (model_acts_bind_stash), which lays the stash out on it; the buffer
 * stays the pool's. Nothing in a stash survives from one micro-batch to the
 * next, so the buffer may have served another chunk before. */
model_acts *model_acts_create_unbound(model *m, int B);
size_t model_acts_stash_bytes(const model *m, int B);
void model_acts_bind_stash(model_acts *a, void *mem);

/* Forward through the held units. With the head: returns the SUM of per-token
 * (GPT) or per-image (ViT) losses of the micro-batch and, for ViT, sets *correct
 * to the number of right predictions (may be NULL). Without the head returns 0. */
double model_forward(model *m, model_acts *a, const model_batch *batch, int *correct);
/* ViT: the logits [B, n_classes] of the last model_forward that was given
 * `correct`, in host memory (valid until the next forward). */
const float *model_acts_vit_logits(const model_acts *a);
/* Backward through the held units, accumulating into the grads. With the head,
 * the gradient of the loss is `loss_scale` per token/image (1 / global count for
 * a mean over the global batch); without it, starts from model_acts_doutput. */
void model_backward(model *m, model_acts *a, const model_batch *batch, float loss_scale);

/* ---- zero-bubble pipelines: the backward in two passes ----
 * Qi et al. 2023 (pp_schedule zb-h1) split a micro-batch's backward into B, what
 * the input gradient needs, and W, the weight gradients, which a schedule then
 * runs later, in what would be pipeline bubbles. Together they compute exactly
 * model_backward's numbers (bitwise: the same kernels on the same data, only at
 * another time).
 *  B  (model_backward_input): all of model_backward except the blocks' matmul
 *     weight and bias gradients, whose output gradients it keeps in the
 *     activations until W: in fp32 mostly in place of stash tensors B is done
 *     with, model_acts_wkeep_bytes (prec NULL: fp32) more per micro-batch. The
 *     layernorms' weight gradients stay in B (they come out of the pass that makes
 *     the input gradient); so do the head's (the chunked head makes its LM-head
 *     weight gradient from each chunk's logit gradient as it goes: deferring it
 *     would recompute every chunk's logits a second time, or keep the [N, V]
 *     gradient the chunks exist to avoid) and the embedding's (the first
 *     chunk's B sends nothing, so nobody waits for it).
 *  W  (model_backward_weight): those matmul gradients, block by block.
 * Hooks: B calls before(u, BACKWARD) for each unit as it starts; W calls every
 * after(u, BACKWARD), in model_backward's order, so after(BACKWARD) still means
 * "the unit's gradients are complete". Between a micro-batch's B and W other
 * micro-batches' passes (and hooks) may run: a strategy whose hooks bind a
 * unit's buffers from before() to after() (ZeRO-2, FSDP) cannot run under it.
 * Needs activations from model_acts_create_split (NULL, with a line on stderr,
 * when model_split_unsupported says why not). */
size_t model_acts_wkeep_bytes(const job_model *spec, const model_shard *shard, int B,
                              const model_precision *prec);
/* NULL when a split backward works on this shard; else what prevents it. */
const char *model_split_unsupported(const model_shard *shard, recompute_kind recompute,
                                    const model_precision *prec);
model_acts *model_acts_create_split(model *m, int B);
void model_backward_input(model *m, model_acts *a, const model_batch *batch, float loss_scale);
void model_backward_weight(model *m, model_acts *a, const model_batch *batch);

/* ---- decoding with a KV cache (kv_cache.c, decode.c) ----
 * Generation feeds one token at a time: each block keeps the k and v rows of
 * every position fed so far (its KV cache, [T_max, 2 * C_l] on this tp rank,
 * ops.h attention_decode's layout; a Llama's kv heads only, 2 NKV_l hs), so
 * a new token costs one row through every matmul and one query over the
 * cached keys (ops->attention_decode) instead of the whole prefix again. For
 * a GPT or Llama model object in fp32, without sequence or context
 * parallelism; tensor parallelism works through the model's layers as in
 * training (a vocab-parallel embedding, column/row-parallel blocks), each
 * rank computing the logits of its vocabulary rows. A pipeline stage decodes
 * its own units: the row crosses between stages through model_kv_row. */
typedef struct model_kv model_kv;
/* NULL when the model cannot decode (not an fp32 language model without SP
 * or cp; T_max beyond the positions it takes) or out of memory. */
model_kv *model_kv_create(model *m, int T_max);
/* The residual stream's row of the step, [d_model] device floats: a stage
 * without the embedding puts its input here before model_decode_step, a
 * stage without the head finds its output here after it. */
float *model_kv_row(model_kv *kv);
void model_kv_destroy(model_kv *kv);
int model_kv_len(const model_kv *kv);     /* positions cached */
int model_kv_capacity(const model_kv *kv);
/* This rank's vocabulary rows [*v0, *v0 + *V_l): the logits it computes. */
void model_vocab_rows(const model *m, int *v0, int *V_l);
/* Feeds `token` at position model_kv_len(kv) (< capacity, else -1) through
 * the held units, appends its k, v to the cache and (with the head) writes
 * this rank's logits of the next token, [V_l] floats, to logits (device
 * memory). token is read with the embedding only. Returns 0. */
int model_decode_step(model *m, model_kv *kv, int token, float *logits);

#endif
