/* tp.c — tensor parallelism (Megatron): the model's split layers (tp.h) and
 * the tp group's collectives over the mesh's tp communicator.
 *
 * The layers are Megatron-LM's layers.py in C: a local matmul through the ops
 * table, then the collective of mappings.py its kind needs. Their order of ops
 * is the plain local layers' (runtime/model/local_layers.c), so tp = 1 and every
 * tp layout share their arithmetic. Where the group starts collectives apart
 * (parallel.tp_overlap) the column layers' backward ones run beside their
 * GEMMs, and under SP the forward's beside the GEMM split along the rows
 * (column_any_forward, row_forward); the rest block: the very next op needs
 * their result. */
#include "runtime/parallel/tp.h"

#include <stdio.h>
#include <stdlib.h>

#include "runtime/parallel/strategy.h"

/* ---- Megatron's mappings, on [N, C] row tensors of nc elements ---- */

/* The bf16 staging for an nc-element tensor, or NULL in fp32. A larger tensor
 * than the stage was sized for (sizes_tp_stage_numel) is a sizing bug: stop. */
static uint16_t *stage_for(const tp_group *g, size_t nc)
{
    if (!g->stage) return NULL;
    if (nc > g->stage_numel) {
        fprintf(stderr, "dtrun: tp: a collective of %zu elements, bf16 staging of %zu\n", nc, g->stage_numel);
        abort();
    }
    return g->stage;
}

/* gather_from_sequence_parallel_region: the whole tensor from this rank's rows,
 * gathered into full under SP; without SP the rows are the whole tensor.
 * Started and finished apart where the group can (tp.h start): start returns
 * the request to finish (NULL: done already, or nothing to gather). Rows of
 * type t: activations are gathered as they are stored (bf16: in place in
 * full, this rank's part copied there first); fp32 ones (gradients) travel
 * through the bf16 stage when the run communicates in bf16. */
static void *gather_rows_start(const tp_group *g, const void *rows, void *full, size_t nc, dt_dtype t)
{
    if (!g->sp) return NULL;
    if (t == DT_BF16) {
        size_t part = nc / (size_t)g->size;
        g->ops->copy((uint16_t *)full + (size_t)g->rank * part, rows, part * sizeof(uint16_t));
        if (g->start) return g->start(g->ctx, TP_START_ALL_GATHER, 1, NULL, full, nc);
        g->all_gather_bf16(g->ctx, full, nc);
        return NULL;
    }
    uint16_t *st = stage_for(g, nc);
    if (st) g->ops->to_bf16(st + (size_t)g->rank * (nc / (size_t)g->size), rows, nc / (size_t)g->size);
    if (g->start) return g->start(g->ctx, TP_START_ALL_GATHER, st != NULL, rows, st ? (void *)st : full, nc);
    if (st) g->all_gather_bf16(g->ctx, st, nc);
    else g->all_gather(g->ctx, rows, full, nc);
    return NULL;
}

static const void *gather_rows_finish(const tp_group *g, void *req, const void *rows, void *full, size_t nc,
                                      dt_dtype t)
{
    if (!g->sp) return rows;
    uint16_t *st = t == DT_BF16 ? NULL : stage_for(g, nc);
    if (req) g->wait(g->ctx, req, TP_START_ALL_GATHER, t == DT_BF16 || st != NULL);
    if (st) g->ops->from_bf16(full, st, nc);
    return full;
}

static const void *gather_rows(const tp_group *g, const void *rows, void *full, size_t nc, dt_dtype t)
{
    return gather_rows_finish(g, gather_rows_start(g, rows, full, nc, t), rows, full, nc, t);
}

/* Where a partial sum over the group is written: the output itself (all-reduced
 * in place), or under SP the [N, C] scratch it is reduce-scattered from. */
static float *partial_of(const tp_group *g, float *out_rows, void *full)
{
    return g->sp ? full : out_rows;
}

/* reduce_from_tensor_model_parallel_region: the SUM over the group of the
 * nc-element partial (in place), or under SP
 * reduce_scatter_to_sequence_parallel_region: this rank's rows of it into
 * out (nc / size elements). Started and finished apart as the gather. In
 * bf16 it travels through the stage from element stage_at on, so several
 * sums can travel at once, each in its own part (row_forward). */
static void *reduce_sum_start_at(const tp_group *g, const float *partial, float *out, size_t nc, size_t stage_at)
{
    uint16_t *st = stage_for(g, stage_at + nc);
    if (st) {
        st += stage_at;
        g->ops->to_bf16(st, partial, nc);
    } else if (!g->sp && out != partial) g->ops->copy(out, partial, nc * sizeof(float));
    tp_start_kind k = g->sp ? TP_START_REDUCE_SCATTER : TP_START_ALL_REDUCE;
    if (g->start) return g->start(g->ctx, k, st != NULL, st ? (const void *)st : g->sp ? partial : out,
                                  st ? (void *)st : out, nc);
    if (st) (g->sp ? g->reduce_scatter_bf16 : g->all_reduce_bf16)(g->ctx, st, nc);
    else if (g->sp) g->reduce_scatter(g->ctx, partial, out, nc);
    else g->all_reduce(g->ctx, out, nc, TP_SUM);
    return NULL;
}

static void reduce_sum_finish_at(const tp_group *g, void *req, float *out, size_t nc, size_t stage_at)
{
    uint16_t *st = stage_for(g, stage_at + nc);
    if (req) g->wait(g->ctx, req, g->sp ? TP_START_REDUCE_SCATTER : TP_START_ALL_REDUCE, st != NULL);
    if (!st) return;
    st += stage_at;
    if (!g->sp) g->ops->from_bf16(out, st, nc);
    else g->ops->from_bf16(out, st + (size_t)g->rank * (nc / (size_t)g->size), nc / (size_t)g->size);
}

/* One sum at a time: through the stage from its start. */
static void *reduce_sum_start(const tp_group *g, const float *partial, float *out, size_t nc)
{
    return reduce_sum_start_at(g, partial, out, nc, 0);
}

static void reduce_sum_finish(const tp_group *g, void *req, float *out, size_t nc)
{
    reduce_sum_finish_at(g, req, out, nc, 0);
}

static void reduce_sum(const tp_group *g, const float *partial, float *out, size_t nc)
{
    reduce_sum_finish(g, reduce_sum_start(g, partial, out, nc), out, nc);
}

/* The row-parallel output: out_rows = the sum of the partials in
 * partial_of(out_rows, full). */
static void reduce_rows(const tp_group *g, float *out_rows, void *full, size_t nc)
{
    reduce_sum(g, partial_of(g, out_rows, full), out_rows, nc);
}

/* The same on a [N, C] buffer of partial sums, in place: returns where this
 * rank's rows of the sum start (buf itself without SP). */
static float *rows_mine(const tp_group *g, float *buf, size_t nc)
{
    return g->sp ? buf + (size_t)g->rank * (nc / (size_t)g->size) : buf;
}

static float *reduce_rows_in_place(const tp_group *g, float *buf, size_t nc)
{
    float *mine = rows_mine(g, buf, nc);
    reduce_sum(g, buf, mine, nc);
    return mine;
}

/* ---- ColumnParallelLinear: output features split; input whole ---- */

/* One product of the column layer on n rows from row r0: x holds those rows
 * of the input; out (and act: matmul then GELU) are written from row r0 on;
 * all of type t. */
static void column_rows(const tp_group *g, void *act, void *out, const void *x, const void *w, const float *b,
                        int r0, int n, int IC, int OC, dt_dtype t)
{
    if (n <= 0) return;
    size_t o = (size_t)r0 * (size_t)OC;
    if (act) g->ops->matmul_gelu_forward(dt_at(act, o, t), dt_at(out, o, t), x, w, b, n, IC, OC, t);
    else g->ops->matmul_forward(dt_at(out, o, t), x, w, b, n, IC, OC, t, t);
}

/* Under SP with parallel.tp_split > 1 the input is gathered from every
 * rank's rows and the GEMM is split along them (Megatron / Transformer
 * Engine's all-gather overlap):
 * this rank's own rows, local already, multiply while the others' gather
 * (where the group starts collectives apart, tp.h start), then the rows
 * before and after them. The split is the same whether the gather is
 * started apart or not: OpenBLAS does not give a block of rows the bits it
 * gives them inside the whole product (its kernels' edge handling follows
 * the row count), so both ways compute the same three blocks, and
 * parallel.tp_overlap changes when the gather is waited for, not a bit of
 * the result. The own rows are read from in_rows unless the gather rounds
 * them (fp32 rows through the bf16 stage): then from the gathered input,
 * after the wait. */
static void column_any_forward(const tp_group *g, void *act, void *out, const void *in_rows, void *full,
                               const void *w, const float *b, int N, int IC, int OC, dt_dtype t)
{
    if (!g->sp || g->split <= 1) { /* whole: the gather, then one GEMM */
        column_rows(g, act, out, gather_rows(g, in_rows, full, (size_t)N * (size_t)IC, t), w, b, 0, N, IC, OC, t);
        return;
    }
    size_t nc = (size_t)N * (size_t)IC;
    int R = N / g->size, r0 = g->rank * R, r1 = r0 + R;
    int early = t == DT_BF16 || !g->stage;
    void *gathering = gather_rows_start(g, in_rows, full, nc, t);
    if (early) column_rows(g, act, out, in_rows, w, b, r0, R, IC, OC, t);
    const void *in = gather_rows_finish(g, gathering, in_rows, full, nc, t);
    if (!early) column_rows(g, act, out, dt_at(in, (size_t)r0 * (size_t)IC, t), w, b, r0, R, IC, OC, t);
    column_rows(g, act, out, in, w, b, 0, r0, IC, OC, t);
    column_rows(g, act, out, dt_at(in, (size_t)r1 * (size_t)IC, t), w, b, r1, N - r1, IC, OC, t);
}

/* LoRA's collective (lora.h): the SUM of the adapters' [N, r] partials
 * over the group, in fp32 (small next to the layer's own). */
static void lora_sum(void *ctx, float *buf, size_t n)
{
    const tp_group *g = ctx;
    g->all_reduce(g->ctx, buf, n, TP_SUM);
}

/* An adapted layer runs whole (no tp_split, no overlap): the input gathered,
 * then the base's GEMM and the adapters' (lora.c). */
static void column_forward(void *ctx, void *out, const void *in_rows, void *full, const void *w, const float *b,
                           int N, int IC, int OC, dt_dtype t, const model_lora *lora)
{
    const tp_group *g = ctx;
    if (lora) {
        const void *in = gather_rows(g, in_rows, full, (size_t)N * (size_t)IC, t);
        lora_column_forward(g->ops, lora, out, in, w, b, N, IC, OC, t);
        return;
    }
    column_any_forward(ctx, NULL, out, in_rows, full, w, b, N, IC, OC, t);
}

static void column_gelu_forward(void *ctx, void *act, void *out, const void *in_rows, void *full, const void *w,
                                const float *b, int N, int IC, int OC, dt_dtype t)
{
    column_any_forward(ctx, act, out, in_rows, full, w, b, N, IC, OC, t);
}

/* The input gradient is this rank's output features' share: summed over the
 * group (copy_to_tensor_model_parallel_region's backward). Overlapped where
 * the group starts collectives apart (tp.h): under SP the input gathers
 * while the input gradient, which does not read it, computes; then the input
 * gradient's sum travels while the weight gradient computes. The same ops on
 * the same values as one after the other (matmul_backward's parts are
 * independent, ops.h), so the same bits. */
static const float *column_backward(void *ctx, float *din, float *dw, float *db, const float *dout,
                                    const void *in_rows, void *full, const void *w, int N, int IC, int OC,
                                    dt_dtype t, const model_lora *lora)
{
    const tp_group *g = ctx;
    size_t nc = (size_t)N * (size_t)IC;
    if (lora) { /* the adapters need the whole input; their part joins d(in) before its sum */
        const void *in = gather_rows(g, in_rows, full, nc, t);
        g->ops->zero(din, nc * sizeof(float));
        g->ops->matmul_backward(din, dw, db, dout, in, w, N, IC, OC, t);
        lora_column_backward(g->ops, lora, din, dout, in, N, IC, OC, t, lora_sum, (void *)g);
        return reduce_rows_in_place(g, din, nc);
    }
    void *gathering = dw ? gather_rows_start(g, in_rows, full, nc, t) : NULL;
    g->ops->zero(din, nc * sizeof(float));
    g->ops->matmul_backward(din, NULL, NULL, dout, NULL, w, N, IC, OC, t);
    const void *in = dw ? gather_rows_finish(g, gathering, in_rows, full, nc, t) : NULL;
    float *mine = rows_mine(g, din, nc);
    void *summing = reduce_sum_start(g, din, mine, nc);
    if (dw || db) g->ops->matmul_backward(NULL, dw, db, dout, in, NULL, N, IC, OC, t);
    reduce_sum_finish(g, summing, mine, nc);
    return mine;
}

/* ---- RowParallelLinear: input features split; output a sum over the group ---- */

/* Under SP the [N, OC] partial sums are reduce-scattered: rank j gets rows
 * [j R, (j + 1) R), R = N / size. The GEMM is split so that they travel
 * while it computes (Transformer Engine's pipelined reduce-scatter): in
 * S = parallel.tp_split steps, step s computes rows [s R / S, (s + 1) R / S) of
 * every rank's part (one GEMM per rank) and, where the group starts
 * collectives apart (tp.h start), starts their reduce-scatter, then goes
 * on with step s + 1; the last step's sum is the one left exposed. Step
 * s's pieces lie in the scratch one after the other, rank by rank, so its
 * reduce-scatter hands each rank its piece (into its rows of out_rows) and
 * each element is summed as in the whole reduce-scatter: it goes to the
 * same rank and the comm layer's order of summation depends on that only
 * (rank order on shm, and on tcp in bf16; the ring's order for that rank's
 * part on tcp in fp32). In bf16 each step stages in its own part of the
 * stage.
 *
 * The GEMM is split into the same blocks when the collectives block
 * (OpenBLAS gives a block of rows other bits than the whole product:
 * column_any_forward): the blocks then lie in the whole reduce-scatter's
 * order, rank by rank, and one reduce-scatter sums them. So
 * parallel.tp_overlap never changes a bit. With tp_split 1 (the default) the
 * GEMM is whole and its sum follows it in line. */

static void row_forward(void *ctx, float *out_rows, void *full, const void *in, const void *w, const float *b,
                        int N, int IC, int OC, dt_dtype t, const model_lora *lora)
{
    const tp_group *g = ctx;
    /* the bias is replicated: on rank 0 only, so the sum adds it once */
    const float *bias = g->rank == 0 ? b : NULL;
    size_t nc = (size_t)N * (size_t)OC, oc = (size_t)OC;
    if (!g->sp || g->split <= 1 || lora) { /* whole: one GEMM (and an adapter's part), then the sum */
        float *partial = partial_of(g, out_rows, full);
        g->ops->matmul_forward(partial, in, w, bias, N, IC, OC, t, DT_F32);
        if (lora) lora_row_forward(g->ops, lora, partial, in, N, IC, OC, t);
        reduce_rows(g, out_rows, full, nc);
        return;
    }
    float *partial = full;
    int size = g->size, R = N / size, apart = g->start != NULL, S = g->split;
    void *summing[TP_SPLIT_MAX];
    for (int s = 0; s < S; s++) {
        int r0 = R * s / S, n = R * (s + 1) / S - r0;
        size_t step_at = (size_t)size * (size_t)r0 * oc, step_nc = (size_t)size * (size_t)n * oc;
        summing[s] = NULL;
        if (n == 0) continue;
        for (int j = 0; j < size; j++) {
            size_t at = apart ? step_at + (size_t)j * (size_t)n * oc : ((size_t)j * (size_t)R + (size_t)r0) * oc;
            g->ops->matmul_forward(partial + at, dt_at(in, (size_t)(j * R + r0) * (size_t)IC, t), w, bias, n, IC, OC, t,
                                   DT_F32);
        }
        if (apart) summing[s] = reduce_sum_start_at(g, partial + step_at, out_rows + (size_t)r0 * oc, step_nc, step_at);
    }
    if (!apart) {
        reduce_rows(g, out_rows, full, nc);
        return;
    }
    for (int s = 0; s < S; s++) {
        int r0 = R * s / S, n = R * (s + 1) / S - r0;
        size_t step_at = (size_t)size * (size_t)r0 * oc, step_nc = (size_t)size * (size_t)n * oc;
        if (n > 0) reduce_sum_finish_at(g, summing[s], out_rows + (size_t)r0 * oc, step_nc, step_at);
    }
}

/* d(out) is whole on every rank (SP: gathered), so the bias gradient sums all
 * N rows and comes out complete and identical on every rank. */
static void row_backward(void *ctx, float *din, float *dw, float *db, const float *dout_rows, void *full,
                         const void *in, const void *w, int N, int IC, int OC, dt_dtype t, const model_lora *lora)
{
    const tp_group *g = ctx;
    const float *dout = gather_rows(g, dout_rows, full, (size_t)N * (size_t)OC, DT_F32);
    g->ops->zero(din, (size_t)N * (size_t)IC * sizeof(float));
    g->ops->matmul_backward(din, dw, db, dout, in, w, N, IC, OC, t);
    if (lora) lora_row_backward(g->ops, lora, din, dout, in, N, IC, OC, t, lora_sum, (void *)g);
}

static void row_dgelu_backward(void *ctx, float *dpre, float *scratch, float *dw, float *db, const float *dout_rows,
                               void *full, const void *in, const void *w, const void *pre, int N, int IC, int OC,
                               dt_dtype t)
{
    const tp_group *g = ctx;
    const float *dout = gather_rows(g, dout_rows, full, (size_t)N * (size_t)OC, DT_F32);
    g->ops->matmul_backward(NULL, dw, db, dout, in, NULL, N, IC, OC, t);
    g->ops->matmul_dgelu_backward(dpre, scratch, dout, w, pre, N, IC, OC, t);
}

/* ---- VocabParallelEmbedding, with the position embedding ---- */

/* Each token's row is non-zero on the rank holding it only: the lookup summed
 * over the group is the embedding. Under SP, adding wpe on rank 0 before the
 * sum gives the same bits as adding it after: (e + wpe) + 0 or (0 + wpe) + e;
 * this rank receives its rows of that sum. */
static void embedding_forward(void *ctx, float *out_rows, void *full, const int *tokens,
                              const float *wte, const float *wpe, const int *pos, int v0, int V_l, int B, int T,
                              int C)
{
    const tp_group *g = ctx;
    const dt_ops *ops = g->ops;
    int N = B * T;
    size_t nc = (size_t)N * (size_t)C;
    if (!g->sp) {
        ops->embedding_forward(out_rows, tokens, wte, v0, V_l, N, C);
        reduce_rows(g, out_rows, NULL, nc);
        if (wpe) ops->posadd_forward(out_rows, wpe, pos, B, T, C);
        return;
    }
    ops->embedding_forward(full, tokens, wte, v0, V_l, N, C);
    if (g->rank == 0 && wpe) ops->posadd_forward(full, wpe, pos, B, T, C);
    reduce_rows(g, out_rows, full, nc);
}

/* Every token's gradient is needed: its wte row may live on this rank. */
static void embedding_backward(void *ctx, float *dwte, float *dwpe, const float *dout_rows,
                               void *full, const int *tokens, const int *pos, int v0, int V_l, int B, int T, int C)
{
    const tp_group *g = ctx;
    int N = B * T;
    const float *dout = gather_rows(g, dout_rows, full, (size_t)N * (size_t)C, DT_F32);
    g->ops->embedding_backward(dwte, dout, tokens, v0, V_l, N, C);
    if (dwpe) g->ops->posadd_backward(dwpe, dout, pos, B, T, C);
}

/* ---- the vocab-parallel LM head (column-parallel over the vocabulary, output
 * kept split) and vocab_parallel_cross_entropy ---- */

/* No rank ever holds a full [N, V] row, nor (chunked, model.h's
 * model_vocab_head) its [N, V_l] part: chunk by chunk, each row's statistics
 * over this rank's columns come out of one read of the chunk (xent_stats: the
 * row's local max m_r, the sum of exps s_r relative to it, the target logit
 * if its column is here). Nothing about a chunk needs another rank, so there
 * is no collective per chunk: after the last one the pairs of all N rows
 * combine by the online softmax's rule, max = max_r m_r and sum = sum_r s_r
 * exp(m_r - max): one MAX all-reduce of the maxima, each rank rescales its
 * sums to the global max (xent_rescale; the local maxima wait in h->loss,
 * which xent_loss writes last), then the sums and the target logits are
 * all-reduced (SUM): three collectives per micro-batch, however many chunks.
 * The backward's recompute reads the global rowmax and sumexp these leave. */
static void head_forward(void *ctx, const model_vocab_head *h)
{
    const tp_group *g = ctx;
    const dt_ops *ops = g->ops;
    int N = h->B * h->T;
    size_t n_all = (size_t)N;
    /* all of x into h->x (without SP x_rows is h->x already), where the
     * chunks' GEMMs and the backward read it */
    gather_rows(g, h->x_rows, h->x, n_all * (size_t)h->C, h->t);
    model_vocab_head_stats_local(ops, h);
    float *local_max = h->loss;
    ops->copy(local_max, h->rowmax, n_all * sizeof(float));
    g->all_reduce(g->ctx, h->rowmax, n_all, TP_MAX);
    ops->xent_rescale(h->sumexp, local_max, h->rowmax, N);
    g->all_reduce(g->ctx, h->sumexp, n_all, TP_SUM);
    g->all_reduce(g->ctx, h->target, n_all, TP_SUM);
    ops->xent_loss(h->loss, h->rowmax, h->sumexp, h->target, h->targets, N);
}

/* The logits' gradient is local (this rank's vocabulary columns); d(x) sums
 * over them, so it is summed over the group like a column-parallel input's. */
static const float *head_backward(void *ctx, const model_vocab_head *h)
{
    const tp_group *g = ctx;
    model_vocab_head_backward_local(g->ops, h);
    return reduce_rows_in_place(g, h->dx, (size_t)h->B * (size_t)h->T * (size_t)h->C);
}

/* ---- sequence parallelism's own needs ---- */

static const void *rows_gather(void *ctx, const void *rows, void *full, size_t NC, dt_dtype t)
{
    return gather_rows(ctx, rows, full, NC, t);
}

/* Megatron sums a sequence-parallel layernorm's gradients over the tp group;
 * a Llama sums its replicated kv heads' weight gradients with it (tp above
 * n_kv_head, model.h). */
static void rows_grad_sum(void *ctx, float *buf, size_t n)
{
    const tp_group *g = ctx;
    g->all_reduce(g->ctx, buf, n, TP_SUM);
}

/* The MoE layer's experts: a row-parallel output's sum (reduce_rows) of a
 * partial the model computed itself. */
static void partial_sum(void *ctx, float *out_rows, float *partial, size_t nc)
{
    reduce_sum(ctx, partial, out_rows, nc);
}
void tp_layers(tp_group *g, model_layers *out)
{
    *out = (model_layers){.ctx = g,
                          .column_forward = column_forward,
                          .column_gelu_forward = column_gelu_forward,
                          .column_backward = column_backward,
                          .row_forward = row_forward,
                          .row_backward = row_backward,
                          .row_dgelu_backward = row_dgelu_backward,
                          .embedding_forward = embedding_forward,
                          .embedding_backward = embedding_backward,
                          .head_forward = head_forward,
                          .head_backward = head_backward,
                          .rows_gather = rows_gather,
                          .rows_grad_sum = rows_grad_sum,
                          .partial_sum = partial_sum};
}

/* ---- the group's collectives over x->tp (ctx: the strat_ctx) ----
 * A failure is recorded in x (strat_fail); later calls are skipped, since the
 * step is lost and a broken group must not be waited on. */

/* One collective on x->tp, timed and checked (skipped after a failure). */
typedef enum { TP_COLL_ALL_REDUCE, TP_COLL_ALL_GATHER, TP_COLL_REDUCE_SCATTER } tp_coll;

static void tp_collective(strat_ctx *x, tp_coll k, const void *send, void *recv, size_t n, comm_dtype dt,
                          comm_op op, const char *what)
{
    if (x->failed) return;
    double t0 = clock_now_s();
    int rc = k == TP_COLL_ALL_REDUCE   ? comm_all_reduce(x->tp, send, recv, n, dt, op)
             : k == TP_COLL_ALL_GATHER ? comm_all_gather(x->tp, send, recv, n, dt)
                                       : comm_reduce_scatter(x->tp, send, recv, n, dt, op);
    strat_comm_done(x, t0, what);
    strat_fail(x, x->tp, rc, what);
}

/* The collectives' names in errors and the trace, blocking or started apart. */
static const char *start_label(tp_start_kind k, int bf16)
{
    static const char *const names[2][3] = {
        {"tp all_reduce", "tp all_gather", "tp reduce_scatter"},
        {"tp all_reduce (bf16)", "tp all_gather (bf16)", "tp reduce_scatter (bf16)"}};
    return names[bf16 != 0][k];
}

static void comm_tp_all_reduce(void *ctx, float *buf, size_t n, tp_op op)
{
    tp_collective(ctx, TP_COLL_ALL_REDUCE, buf, buf, n, COMM_F32, op == TP_MAX ? COMM_MAX : COMM_SUM,
                  op == TP_MAX ? "tp all_reduce (max)" : start_label(TP_START_ALL_REDUCE, 0));
}

static void comm_tp_all_gather(void *ctx, const float *local, float *full, size_t full_count)
{
    tp_collective(ctx, TP_COLL_ALL_GATHER, local, full, full_count, COMM_F32, COMM_SUM,
                  start_label(TP_START_ALL_GATHER, 0));
}

static void comm_tp_reduce_scatter(void *ctx, const float *full, float *local, size_t full_count)
{
    tp_collective(ctx, TP_COLL_REDUCE_SCATTER, full, local, full_count, COMM_F32, COMM_SUM,
                  start_label(TP_START_REDUCE_SCATTER, 0));
}

/* bf16, in place (tp.h) */
static size_t own_part(const strat_ctx *x, size_t full_count)
{
    return (size_t)x->tpg.rank * (full_count / (size_t)x->tpg.size);
}

static void comm_tp_all_reduce_bf16(void *ctx, uint16_t *buf, size_t n)
{
    tp_collective(ctx, TP_COLL_ALL_REDUCE, buf, buf, n, COMM_BF16, COMM_SUM, start_label(TP_START_ALL_REDUCE, 1));
}

static void comm_tp_all_gather_bf16(void *ctx, uint16_t *full, size_t full_count)
{
    tp_collective(ctx, TP_COLL_ALL_GATHER, full + own_part(ctx, full_count), full, full_count, COMM_BF16, COMM_SUM,
                  start_label(TP_START_ALL_GATHER, 1));
}

static void comm_tp_reduce_scatter_bf16(void *ctx, uint16_t *full, size_t full_count)
{
    tp_collective(ctx, TP_COLL_REDUCE_SCATTER, full, full + own_part(ctx, full_count), full_count, COMM_BF16,
                  COMM_SUM, start_label(TP_START_REDUCE_SCATTER, 1));
}

/* Started apart (tp.h start / wait): the same collectives, asynchronous; the
 * wait is what the step's communication time and trace count (the part
 * that was not hidden behind compute). */
static void *comm_tp_start(void *ctx, tp_start_kind k, int bf16, const void *send, void *recv, size_t n)
{
    strat_ctx *x = ctx;
    if (x->failed) return NULL;
    comm_dtype dt = bf16 ? COMM_BF16 : COMM_F32;
    if (bf16) { /* in place on recv, as the blocking _bf16 collectives */
        uint16_t *full = recv;
        send = k == TP_START_ALL_GATHER ? (const void *)(full + own_part(x, n)) : (const void *)full;
        if (k == TP_START_REDUCE_SCATTER) recv = full + own_part(x, n);
    }
    comm_req *req = NULL;
    int rc = k == TP_START_ALL_REDUCE   ? comm_all_reduce_async(x->tp, send, recv, n, dt, COMM_SUM, &req)
             : k == TP_START_ALL_GATHER ? comm_all_gather_async(x->tp, send, recv, n, dt, &req)
                                        : comm_reduce_scatter_async(x->tp, send, recv, n, dt, COMM_SUM, &req);
    strat_fail(x, x->tp, rc, start_label(k, bf16));
    return req;
}

static void comm_tp_wait(void *ctx, void *req, tp_start_kind k, int bf16)
{
    strat_ctx *x = ctx;
    strat_wait(x, x->tp, req, start_label(k, bf16));
}

int tp_apply(strat_ctx *x, int sp, model *const *chunks, int n_chunks)
{
    /* the model shards' tp rank: the mesh makes it this rank's place in x->tp */
    x->tpg = (tp_group){.ops = x->ops, .rank = x->at.tp, .size = x->job->parallel.tp, .sp = sp,
                        .ctx = x, .all_reduce = comm_tp_all_reduce,
                        .all_gather = comm_tp_all_gather, .reduce_scatter = comm_tp_reduce_scatter};
    if (x->job->parallel.tp_overlap) x->tpg.start = comm_tp_start, x->tpg.wait = comm_tp_wait;
    x->tpg.split = x->job->parallel.tp_split < TP_SPLIT_MAX ? x->job->parallel.tp_split : TP_SPLIT_MAX;
    size_t stage = sizes_tp_stage_numel(x->sz);
    if (stage) {
        if (!(x->tpg.stage = x->ops->alloc(stage * sizeof(uint16_t)))) return -1;
        acct_add(x->acct, ACCT_BUFFERS, (long long)(stage * sizeof(uint16_t)));
        x->tpg.stage_numel = stage;
        x->tpg.all_reduce_bf16 = comm_tp_all_reduce_bf16;
        x->tpg.all_gather_bf16 = comm_tp_all_gather_bf16;
        x->tpg.reduce_scatter_bf16 = comm_tp_reduce_scatter_bf16;
    }
    model_layers layers;
    tp_layers(&x->tpg, &layers);
    for (int i = 0; i < n_chunks; i++) model_set_layers(chunks[i], &layers);
    return 0;
}

void tp_release(strat_ctx *x)
{
    if (!x->tpg.stage) return;
    acct_add(x->acct, ACCT_BUFFERS, -(long long)(x->tpg.stage_numel * sizeof(uint16_t)));
    x->ops->free(x->tpg.stage);
    x->tpg.stage = NULL;
}
