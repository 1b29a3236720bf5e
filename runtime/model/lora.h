/* lora.h — LoRA's adapters on the model's linear layers (Hu et al. 2021, as
 * PEFT computes them): y = W x + b + (alpha / r) B A dropout(x), with the
 * base W (and every other tensor of the model) frozen and A [r, in], B
 * [out, r] trained (train.lora, jobspec.h job_lora).
 *
 * Where the adapters live. Each block's unit holds its adapters after its
 * base tensors (param_spec.lora): for every target the job names, in the
 * order q, k, v, o, gate, up, down, its A then its B. Under tensor
 * parallelism they split as their base layer does: a column-parallel base
 * (q, k, v, gate, up: output features split) keeps A whole on every rank
 * and B's rows split like the base's; a row-parallel base (o, down: input
 * features split) splits A by its input columns and keeps B whole. So a
 * rank's adapter computes on exactly the rows and columns its base does.
 *
 * The math, per layer call (model_layers in model.h passes a model_lora;
 * the plain local layers and the tp ones both call the functions below and
 * add their collectives around them, so one process and every tp layout
 * share the arithmetic):
 *   column  y[:, cols] += s (xd A^T) B^T   xd = dropout(x), x whole (SP:
 *           gathered); the sum W x + deltas is kept in fp32 and stored in
 *           the activations' type once. Backward: dB += s dy^T h, dh = s dy B
 *           is this rank's part of the sum over its output rows: it goes
 *           into the input gradient as it is (the layer then sums that over
 *           the group, as the base's), and A's gradient takes the whole dh
 *           (`sum`: the group's all-reduce of [N, r]).
 *   row     partial += s (xd A_r^T) B^T    this rank's part of the product,
 *           summed by the very reduction that sums the base's partial
 *           products. Backward: h = the sum over the group of the ranks'
 *           parts (`sum`), then dB += s dy^T h, dh = s dy B (whole on every
 *           rank), dA_r += dh^T xd, d(in) += dh A_r.
 * h = s xd A^T is recomputed in backward rather than kept ([N, r]: cheap
 * next to the base's GEMMs, and nothing to add to the stash).
 *
 * Dropout (train.lora.dropout p, training only) draws each element's mask
 * from (the run's seed, the step, the layer and target, the token's place
 * in the global batch, the feature's place in the layer's whole input):
 * ops.h dropout_forward, so every layout drops the same elements. */
#ifndef DTRUN_LORA_H
#define DTRUN_LORA_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/ops.h"
#include "lib/job/jobspec.h"

/* One adapter of a layer, this tp rank's. */
typedef struct {
    const void *A;  /* [r, IC] of the weights' type (row-parallel: this rank's input columns) */
    const void *B;  /* [cols, r] (column-parallel: this target's local output rows; row: whole) */
    float *dA, *dB; /* their gradients (fp32, accumulated), in backward */
    int col0, cols; /* column-parallel: the target's local output columns [col0, col0 + cols) of
                       the layer's OC (q, k, v in the packed qkv; gate, up in gate|up) */
    uint64_t key;   /* its dropout draws' key this step */
} lora_adapter;

#define LORA_PER_LAYER 3 /* q, k and v share one layer */

/* The adapters of one layer call and the scratch they compute in (the
 * model's working set, acts.c). */
typedef struct {
    int n;                             /* adapters on the layer */
    lora_adapter ad[LORA_PER_LAYER];
    int r;
    float scale;                       /* alpha / r */
    float p;                           /* dropout: 0 in evaluation */
    const long long *rows;             /* [N] each row's place in the global batch (dropout) */
    long long feats, feat0;            /* the layer input's global width and this rank's first
                                          column of it (row-parallel: its split) */
    float *y;                          /* [N, OC] fp32 */
    void *xd;                          /* [N, IC] activations' type: dropout(x) */
    void *h;                           /* [N, r] activations' type (bf16: the rounding of h32) */
    float *h32, *dh;                   /* [N, r] */
    float *dt;                         /* [N, cols] one target's output columns */
    float *dxd;                        /* [N, IC] (dropout only) */
} model_lora;

/* The tensor-parallel group's SUM all-reduce of n floats in place (NULL: one rank). */
typedef void (*lora_sum_fn)(void *ctx, float *buf, size_t n);

/* column: out [N, OC] (type t) = x w^T + b + every adapter's delta in its
 * columns. x [N, IC] whole. */
void lora_column_forward(const dt_ops *ops, const model_lora *l, void *out, const void *x, const void *w,
                         const float *b, int N, int IC, int OC, dt_dtype t);
/* column: din [N, IC] += the adapters' part of the input gradient (this
 * rank's, summed over the group with the base's by the caller); dA, dB +=. */
void lora_column_backward(const dt_ops *ops, const model_lora *l, float *din, const float *dout, const void *x, int N,
                          int IC, int OC, dt_dtype t, lora_sum_fn sum, void *ctx);
/* row: partial [N, OC] fp32 += this rank's part of the adapter's delta. */
void lora_row_forward(const dt_ops *ops, const model_lora *l, float *partial, const void *x, int N, int IC, int OC,
                      dt_dtype t);
/* row: din [N, IC] += the adapter's input gradient; dA, dB +=. dout whole. */
void lora_row_backward(const dt_ops *ops, const model_lora *l, float *din, const float *dout, const void *x, int N,
                       int IC, int OC, dt_dtype t, lora_sum_fn sum, void *ctx);

/* ---- the adapters' shapes (params.c makes their specs from these) ---- */
/* Adapters per block: one per target of train.lora (0 when it is off). */
int lora_count(const job_model *m);
/* The target (LORA_* bit index) of a block's k-th adapter. */
int lora_target(const job_model *m, int k);
/* Its base layer's global input and output features, and whether that layer
 * is row-parallel (o, down). */
void lora_geometry(const job_model *m, int target, int *in, int *out, int *row);

/* FLOPs of one block's adapters on a tp rank of tp, for `rows` rows: their
 * forward (A's products and B's), of which A's (the backward recomputes h:
 * it runs 2 fwd + fwd_a), and the forward a block recompute re-runs (all but
 * down's). A column-parallel base's A is computed whole on every tp rank. */
void lora_block_flops(const job_model *m, int tp, double rows, double *fwd, double *fwd_a, double *fwd_recomputed);

#endif
