/* tp.c — tensor parallelism (Megatron): the model's split layers (tp.h) and
 * the tp group's collectives over the mesh's tp communicator.
 *
 * The layers are Megatron-LM's layers.py in C: a local matmul through the ops
 * table, then the collective of mappings.py its kind needs. Their order of ops
 * is the plain local layers' (runtime/model/local_layers.c), so tp = 1 and every
 * tp layout share their arithmetic. The collectives are blocking: the very
 * next op needs their result. */
#include "runtime/parallel/tp.h"

#include "runtime/parallel/strategy.h"

/* ---- Megatron's mappings, on [N, C] row tensors of nc elements ---- */

/* gather_from_sequence_parallel_region: the whole tensor from this rank's rows,
 * gathered into full under SP; without SP the rows are the whole tensor. */
static const float *gather_rows(const tp_group *g, const float *rows, float *full, size_t nc)
{
    if (!g->sp) return rows;
    g->all_gather(g->ctx, rows, full, nc);
    return full;
}

/* Where a partial sum over the group is written: the output itself (all-reduced
 * in place), or under SP the [N, C] scratch it is reduce-scattered from. */
static float *partial_of(const tp_group *g, float *out_rows, float *full)
{
    return g->sp ? full : out_rows;
}

/* reduce_from_tensor_model_parallel_region (all-reduce in place), or under SP
 * reduce_scatter_to_sequence_parallel_region (full into this rank's rows). */
static void reduce_rows(const tp_group *g, float *out_rows, float *full, size_t nc)
{
    if (g->sp) g->reduce_scatter(g->ctx, full, out_rows, nc);
    else g->all_reduce(g->ctx, out_rows, nc, TP_SUM);
}

/* The same on a [N, C] buffer of partial sums, in place: returns where this
 * rank's rows of the sum start (buf itself without SP). */
static float *reduce_rows_in_place(const tp_group *g, float *buf, size_t nc)
{
    if (!g->sp) {
        g->all_reduce(g->ctx, buf, nc, TP_SUM);
        return buf;
    }
    float *mine = buf + (size_t)g->rank * (nc / (size_t)g->size);
    g->reduce_scatter(g->ctx, buf, mine, nc);
    return mine;
}

/* ---- ColumnParallelLinear: output features split; input whole ---- */

static void column_forward(void *ctx, float *out, const float *in_rows, float *full, const float *w,
                           const float *b, int N, int IC, int OC)
{
    const tp_group *g = ctx;
    const float *in = gather_rows(g, in_rows, full, (size_t)N * (size_t)IC);
    g->ops->matmul_forward(out, in, w, b, N, IC, OC);
}

/* The input gradient is this rank's output features' share: summed over the
 * group (copy_to_tensor_model_parallel_region's backward). */
static const float *column_backward(void *ctx, float *din, float *dw, float *db, const float *dout,
                                    const float *in_rows, float *full, const float *w, int N, int IC,
                                    int OC)
{
    const tp_group *g = ctx;
    size_t nc = (size_t)N * (size_t)IC;
    const float *in = gather_rows(g, in_rows, full, nc);
    g->ops->zero(din, nc * sizeof(float));
    g->ops->matmul_backward(din, dw, db, dout, in, w, N, IC, OC);
    return reduce_rows_in_place(g, din, nc);
}

/* ---- RowParallelLinear: input features split; output a sum over the group ---- */

static void row_forward(void *ctx, float *out_rows, float *full, const float *in, const float *w,
                        const float *b, int N, int IC, int OC)
{
    const tp_group *g = ctx;
    /* the bias is replicated: on rank 0 only, so the sum adds it once */
    g->ops->matmul_forward(partial_of(g, out_rows, full), in, w, g->rank == 0 ? b : NULL, N, IC, OC);
    reduce_rows(g, out_rows, full, (size_t)N * (size_t)OC);
}

/* d(out) is whole on every rank (SP: gathered), so the bias gradient sums all
 * N rows and comes out complete and identical on every rank. */
static void row_backward(void *ctx, float *din, float *dw, float *db, const float *dout_rows,
                         float *full, const float *in, const float *w, int N, int IC, int OC)
{
    const tp_group *g = ctx;
    const float *dout = gather_rows(g, dout_rows, full, (size_t)N * (size_t)OC);
    g->ops->zero(din, (size_t)N * (size_t)IC * sizeof(float));
    g->ops->matmul_backward(din, dw, db, dout, in, w, N, IC, OC);
}

/* ---- VocabParallelEmbedding, with the position embedding ---- */

/* Each token's row is non-zero on the rank holding it only: the lookup summed
 * over the group is the embedding. Under SP, adding wpe on rank 0 before the
 * sum gives the same bits as adding it after: (e + wpe) + 0 or (0 + wpe) + e;
 * this rank receives its rows of that sum. */
static void embedding_forward(void *ctx, float *out_rows, float *full, const int *tokens,
                              const float *wte, const float *wpe, int v0, int V_l, int B, int T, int C)
{
    const tp_group *g = ctx;
    const dt_ops *ops = g->ops;
    int N = B * T;
    size_t nc = (size_t)N * (size_t)C;
    if (!g->sp) {
        ops->embedding_forward(out_rows, tokens, wte, v0, V_l, N, C);
        g->all_reduce(g->ctx, out_rows, nc, TP_SUM);
        ops->posadd_forward(out_rows, wpe, B, T, C);
        return;
    }
    ops->embedding_forward(full, tokens, wte, v0, V_l, N, C);
    if (g->rank == 0) ops->posadd_forward(full, wpe, B, T, C);
    g->reduce_scatter(g->ctx, full, out_rows, nc);
}

/* Every token's gradient is needed: its wte row may live on this rank. */
static void embedding_backward(void *ctx, float *dwte, float *dwpe, const float *dout_rows,
                               float *full, const int *tokens, int v0, int V_l, int B, int T, int C)
{
    const tp_group *g = ctx;
    int N = B * T;
    const float *dout = gather_rows(g, dout_rows, full, (size_t)N * (size_t)C);
    g->ops->embedding_backward(dwte, dout, tokens, v0, V_l, N, C);
    g->ops->posadd_backward(dwpe, dout, B, T, C);
}

/* ---- the vocab-parallel LM head (column-parallel over the vocabulary, output
 * kept split) and vocab_parallel_cross_entropy ---- */

/* No rank ever holds a full [N, V] row: the row max (MAX), the sum of
 * exponentials and the target's logit (SUM) are reduced over the group. */
static void head_forward(void *ctx, const model_vocab_head *h)
{
    const tp_group *g = ctx;
    const dt_ops *ops = g->ops;
    int N = h->B * h->T;
    size_t n = (size_t)N;
    const float *x = gather_rows(g, h->x_rows, h->x, n * (size_t)h->C);
    ops->matmul_forward(h->logits, x, h->wte, NULL, N, h->C, h->V_l);
    ops->xent_rowmax(h->rowmax, h->logits, N, h->V_l);
    g->all_reduce(g->ctx, h->rowmax, n, TP_MAX);
    ops->xent_sumexp(h->sumexp, h->logits, h->rowmax, N, h->V_l);
    g->all_reduce(g->ctx, h->sumexp, n, TP_SUM);
    ops->xent_target(h->target, h->logits, h->targets, h->v0, N, h->V_l);
    g->all_reduce(g->ctx, h->target, n, TP_SUM);
    ops->xent_loss(h->loss, h->rowmax, h->sumexp, h->target, h->targets, N);
}

/* The logits' gradient is local (this rank's vocabulary columns); d(x) sums
 * over them, so it is summed over the group like a column-parallel input's. */
static const float *head_backward(void *ctx, const model_vocab_head *h)
{
    const tp_group *g = ctx;
    const dt_ops *ops = g->ops;
    int T = h->T, C = h->C, Vl = h->V_l;
    size_t nc = (size_t)h->B * (size_t)T * (size_t)C;
    ops->zero(h->dx, nc * sizeof(float));
    /* one sample at a time: the logits' gradient never needs a second [N, V_l] */
    for (int b = 0; b < h->B; b++) {
        size_t r = (size_t)b * (size_t)T;
        ops->xent_backward(h->dlogits, h->logits + r * (size_t)Vl, h->rowmax + r, h->sumexp + r,
                           h->targets + r, h->dloss + r, h->v0, T, Vl);
        ops->matmul_backward(h->dx + r * (size_t)C, h->dwte, NULL, h->dlogits, h->x + r * (size_t)C,
                             h->wte, T, C, Vl);
    }
    return reduce_rows_in_place(g, h->dx, nc);
}

/* ---- sequence parallelism's own needs ---- */

static const float *rows_gather(void *ctx, const float *rows, float *full, size_t NC)
{
    return gather_rows(ctx, rows, full, NC);
}

/* Megatron sums a sequence-parallel layernorm's gradients over the tp group. */
static void rows_grad_sum(void *ctx, float *buf, size_t n)
{
    const tp_group *g = ctx;
    g->all_reduce(g->ctx, buf, n, TP_SUM);
}

void tp_layers(tp_group *g, model_layers *out)
{
    *out = (model_layers){.ctx = g,
                          .column_forward = column_forward,
                          .column_backward = column_backward,
                          .row_forward = row_forward,
                          .row_backward = row_backward,
                          .embedding_forward = embedding_forward,
                          .embedding_backward = embedding_backward,
                          .head_forward = head_forward,
                          .head_backward = head_backward,
                          .rows_gather = rows_gather,
                          .rows_grad_sum = rows_grad_sum};
}

/* ---- the group's collectives over x->tp (ctx: the strat_ctx) ----
 * A failure is recorded in x (strat_fail); later calls are skipped, since the
 * step is lost and a broken group must not be waited on. */

static void comm_tp_all_reduce(void *ctx, float *buf, size_t n, tp_op op)
{
    strat_ctx *x = ctx;
    if (x->failed) return;
    const char *what = op == TP_MAX ? "tp all_reduce (max)" : "tp all_reduce";
    double t0 = clock_now_s();
    int rc = comm_all_reduce(x->tp, buf, buf, n, COMM_F32, op == TP_MAX ? COMM_MAX : COMM_SUM);
    strat_comm_done(x, t0, what);
    strat_fail(x, x->tp, rc, what);
}

static void comm_tp_all_gather(void *ctx, const float *local, float *full, size_t full_count)
{
    strat_ctx *x = ctx;
    if (x->failed) return;
    double t0 = clock_now_s();
    int rc = comm_all_gather(x->tp, local, full, full_count, COMM_F32);
    strat_comm_done(x, t0, "tp all_gather");
    strat_fail(x, x->tp, rc, "tp all_gather");
}

static void comm_tp_reduce_scatter(void *ctx, const float *full, float *local, size_t full_count)
{
    strat_ctx *x = ctx;
    if (x->failed) return;
    double t0 = clock_now_s();
    int rc = comm_reduce_scatter(x->tp, full, local, full_count, COMM_F32, COMM_SUM);
    strat_comm_done(x, t0, "tp reduce_scatter");
    strat_fail(x, x->tp, rc, "tp reduce_scatter");
}

void tp_apply(strat_ctx *x, int sp, model *const *chunks, int n_chunks)
{
    /* the model shards' tp rank: the mesh makes it this rank's place in x->tp */
    x->tpg = (tp_group){.ops = x->ops, .rank = x->at.tp, .size = x->job->parallel.tp, .sp = sp,
                        .ctx = x, .all_reduce = comm_tp_all_reduce,
                        .all_gather = comm_tp_all_gather, .reduce_scatter = comm_tp_reduce_scatter};
    model_layers layers;
    tp_layers(&x->tpg, &layers);
    for (int i = 0; i < n_chunks; i++) model_set_layers(chunks[i], &layers);
}
