/* tp.h — tensor parallelism (Megatron-LM's tensor_parallel layers): the
 * column-parallel linear, the row-parallel linear, the vocab-parallel embedding
 * and the vocab-parallel LM head with its cross-entropy, as the model's
 * layers (model_layers in model.h). Each runs the same local ops as the plain
 * layer on this rank's shard and adds the collectives its kind needs:
 *
 *   layer        forward                        backward
 *   column       identity (SP: all-gather in)   all-reduce d(in) (SP: reduce-scatter)
 *   row          all-reduce out (SP: r-scatter)  identity (SP: all-gather d(out))
 *   embedding    all-reduce out (SP: r-scatter)  identity (SP: all-gather d(out))
 *   head + loss  (SP: all-gather in) and the     all-reduce d(in) (SP: reduce-scatter)
 *                row max (MAX), sum of exps and
 *                target logit (SUM) all-reduced,
 *                once after the head's chunks
 *
 * A row-parallel layer's bias is added on tp rank 0 only, before the sum, so it
 * is added once. With sequence parallelism (SP) the residual stream's rows are
 * split over the group: rank r's part of a [N, C] tensor is its r-th N/size rows,
 * which is comm_chunk's cut of the N*C elements since size divides N.
 *
 * The layers reach the group through tp_group's collectives: the engine's go
 * over the tp communicator (strategy.h: tp_apply), a test may pass threads.
 *
 * Mixed precision (tp_group.stage set): the [N, C] activations and their
 * gradients travel as bf16, as in Megatron: half the bytes. A tensor is
 * rounded into the stage, the collective sums in fp32 and rounds once, the
 * result is widened back. A column layer's input is bf16 values already (the
 * model rounds it), so its gathers lose nothing; partial sums and gradients
 * take one rounding more than on one process, which the bf16 layout tolerance
 * covers (test/integration/parallel_bf16.sh). The head's statistics (row max,
 * sum of exponentials, target logit) and layernorm gradients stay fp32. */
#ifndef DTRUN_TP_H
#define DTRUN_TP_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/ops.h"
#include "runtime/model/model.h"

typedef enum { TP_SUM = 0, TP_MAX } tp_op;
/* parallel.tp_split's largest value (the job spec's bound). */
#define TP_SPLIT_MAX 64
/* The collectives a layer may start and finish apart (tp_group.start). */
typedef enum { TP_START_ALL_REDUCE, TP_START_ALL_GATHER, TP_START_REDUCE_SCATTER } tp_start_kind;

typedef struct {
    const dt_ops *ops;
    int rank, size;  /* this rank's place in the tensor-parallel group */
    int sp;          /* 1: sequence parallel (the stream's rows split over the group) */
    int split;       /* parallel.tp_split: under SP, > 1 splits the forward's GEMMs along the
                        rows (a column layer's own rows first, a row layer's in this many
                        steps), so that their collectives can run beside them (tp.c);
                        0 or 1: whole GEMMs (a group made without it, as the tests do) */
    void *ctx;       /* the collectives' */
    /* In place over the group. */
    void (*all_reduce)(void *ctx, float *buf, size_t n, tp_op op);
    /* SP only. Every rank's part (`local`) of a full_count tensor into `full`;
     * in place when `local` is this rank's part of `full`. */
    void (*all_gather)(void *ctx, const float *local, float *full, size_t full_count);
    /* SP only. This rank's part of the SUM of every rank's `full` into `local`;
     * in place when `local` is this rank's part of `full`. */
    void (*reduce_scatter)(void *ctx, const float *full, float *local, size_t full_count);
    /* Mixed precision only (NULL in fp32): the bf16 staging, stage_numel
     * elements (sizes_tp_stage_numel: one micro-batch's [N, C]), and the same
     * collectives on bf16 in place (this rank's part of `full` is its
     * rank-th full_count / size elements). */
    uint16_t *stage;
    size_t stage_numel;
    void (*all_reduce_bf16)(void *ctx, uint16_t *buf, size_t n);
    void (*all_gather_bf16)(void *ctx, uint16_t *full, size_t full_count);
    void (*reduce_scatter_bf16)(void *ctx, uint16_t *full, size_t full_count);
    /* Optional (NULL: every collective blocks): the SUM all-reduce, the
     * all-gather and the reduce-scatter above started and finished apart, so
     * a layer computes beside them (Megatron's overlap of the column layer's
     * backward: the input gathers while the input gradient computes, and
     * the input gradient's sum travels while the weight gradient computes;
     * under SP Transformer Engine's of the forward: a column layer's input
     * gathers while its own rows multiply, a row layer's partial sums are
     * reduce-scattered piece by piece while the next piece's rows multiply).
     * fp32: the arguments of all_reduce / all_gather / reduce_scatter (send =
     * recv = buf for the all-reduce); bf16 (staged): in place on `recv` as
     * the _bf16 ones, send unused. Returns a request for wait, NULL when
     * there is nothing to wait for (a failed group). */
    void *(*start)(void *ctx, tp_start_kind k, int bf16, const void *send, void *recv, size_t full_count);
    void (*wait)(void *ctx, void *req, tp_start_kind k, int bf16);
} tp_group;

/* The model's layers over group g (their ctx: g, which must outlive their use). */
void tp_layers(tp_group *g, model_layers *out);

#endif
