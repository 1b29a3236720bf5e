/* local_layers.c — the model's layers that tensor parallelism splits, as plain
 * local layers: what they are on one tp rank, where nothing is split and there
 * is no one to talk to. The model computes through these unless a strategy sets
 * its tensor-parallel ones (model_set_layers; runtime/parallel/tp.c), which run
 * the same ops in the same order plus their collectives, so one process and
 * every tp layout share their arithmetic. The local attention core is here
 * too (model.attention fused or naive), the one a context-parallel ring
 * replaces (model_set_attention; runtime/parallel/cp.c). */
#include "runtime/model/model_internal.h"

#include <stdio.h>
#include <stdlib.h>

static void column_forward(void *ctx, void *out, const void *in_rows, void *full, const void *w, const float *b,
                           int N, int IC, int OC, dt_dtype t, const model_lora *lora)
{
    const model *m = ctx;
    (void)full;
    if (lora) lora_column_forward(m->ops, lora, out, in_rows, w, b, N, IC, OC, t);
    else m->ops->matmul_forward(out, in_rows, w, b, N, IC, OC, t, t);
}

static void column_gelu_forward(void *ctx, void *act, void *out, const void *in_rows, void *full, const void *w,
                                const float *b, int N, int IC, int OC, dt_dtype t)
{
    const model *m = ctx;
    (void)full;
    m->ops->matmul_gelu_forward(act, out, in_rows, w, b, N, IC, OC, t);
}

static const float *column_backward(void *ctx, float *din, float *dw, float *db, const float *dout,
                                    const void *in_rows, void *full, const void *w, int N, int IC, int OC,
                                    dt_dtype t, const model_lora *lora)
{
    const model *m = ctx;
    (void)full;
    m->ops->zero(din, (size_t)N * (size_t)IC * sizeof(float));
    m->ops->matmul_backward(din, dw, db, dout, in_rows, w, N, IC, OC, t);
    if (lora) lora_column_backward(m->ops, lora, din, dout, in_rows, N, IC, OC, t, NULL, NULL);
    return din;
}

static void row_forward(void *ctx, float *out_rows, void *full, const void *in, const void *w, const float *b,
                        int N, int IC, int OC, dt_dtype t, const model_lora *lora)
{
    const model *m = ctx;
    (void)full;
    m->ops->matmul_forward(out_rows, in, w, b, N, IC, OC, t, DT_F32);
    if (lora) lora_row_forward(m->ops, lora, out_rows, in, N, IC, OC, t);
}

static void row_backward(void *ctx, float *din, float *dw, float *db, const float *dout_rows, void *full,
                         const void *in, const void *w, int N, int IC, int OC, dt_dtype t, const model_lora *lora)
{
    const model *m = ctx;
    (void)full;
    m->ops->zero(din, (size_t)N * (size_t)IC * sizeof(float));
    m->ops->matmul_backward(din, dw, db, dout_rows, in, w, N, IC, OC, t);
    if (lora) lora_row_backward(m->ops, lora, din, dout_rows, in, N, IC, OC, t, NULL, NULL);
}

static void row_dgelu_backward(void *ctx, float *dpre, float *scratch, float *dw, float *db, const float *dout_rows,
                               void *full, const void *in, const void *w, const void *pre, int N, int IC, int OC,
                               dt_dtype t)
{
    const model *m = ctx;
    (void)full;
    m->ops->matmul_backward(NULL, dw, db, dout_rows, in, NULL, N, IC, OC, t);
    m->ops->matmul_dgelu_backward(dpre, scratch, dout_rows, w, pre, N, IC, OC, t);
}

static void embedding_forward(void *ctx, float *out_rows, void *full, const int *tokens,
                              const float *wte, const float *wpe, const int *pos, int v0, int V_l, int B, int T,
                              int C)
{
    const model *m = ctx;
    (void)full;
    m->ops->embedding_forward(out_rows, tokens, wte, v0, V_l, B * T, C);
    if (wpe) m->ops->posadd_forward(out_rows, wpe, pos, B, T, C);
}

static void embedding_backward(void *ctx, float *dwte, float *dwpe, const float *dout_rows,
                               void *full, const int *tokens, const int *pos, int v0, int V_l, int B, int T, int C)
{
    const model *m = ctx;
    (void)full;
    m->ops->embedding_backward(dwte, dout_rows, tokens, v0, V_l, B * T, C);
    if (dwpe) m->ops->posadd_backward(dwpe, dout_rows, pos, B, T, C);
}

/* Chunk by chunk (model_vocab_head): each chunk's logits, reduced to its rows'
 * statistics in one read (xent_stats), then dropped; the loss from the
 * statistics of every row. */
static void head_forward(void *ctx, const model_vocab_head *h)
{
    const dt_ops *ops = ((const model *)ctx)->ops;
    model_vocab_head_stats_local(ops, h);
    ops->xent_loss(h->loss, h->rowmax, h->sumexp, h->target, h->targets, h->B * h->T);
}

static const float *head_backward(void *ctx, const model_vocab_head *h)
{
    model_vocab_head_backward_local(((const model *)ctx)->ops, h);
    return h->dx;
}

static const void *rows_gather(void *ctx, const void *rows, void *full, size_t NC, dt_dtype t)
{
    (void)ctx, (void)full, (void)NC, (void)t;
    return rows;
}

static void rows_grad_sum(void *ctx, float *buf, size_t n)
{
    (void)ctx, (void)buf, (void)n; /* one rank holds every row */
}

static void partial_sum(void *ctx, float *out_rows, float *partial, size_t nc)
{
    const model *m = ctx; /* one rank: the partial is the sum */
    if (out_rows != partial) m->ops->copy(out_rows, partial, nc * sizeof(float));
}

/* naive (model.attention): the softmax probabilities materialised and kept
 * as the stat, [B, NH, T, T]; scratch another such for backward. */
/* The naive attention has no document mask (job_check refuses packed samples
 * with it): asked for one, that check was missed. */
static void no_docs(const model_docs *docs)
{
    if (!docs) return;
    fprintf(stderr, "dtrun: model: the naive attention cannot mask packed samples (model.attention fused can)\n");
    abort();
}

static void naive_forward(void *ctx, void *out, void *stat, float *scratch, const void *qkv, const model_docs *docs,
                          int B, int T, int C, int NH, int NKV, int causal, dt_dtype t)
{
    (void)scratch;
    no_docs(docs);
    ((const model *)ctx)->ops->attention_forward(out, stat, qkv, B, T, C, NH, NKV, causal, t);
}

static void naive_backward(void *ctx, float *dqkv, float *scratch, const float *dout, const void *qkv,
                           const void *out, const void *stat, const model_docs *docs, int B, int T, int C, int NH,
                           int NKV, int causal, dt_dtype t)
{
    (void)out;
    no_docs(docs);
    ((const model *)ctx)->ops->attention_backward(dqkv, scratch, dout, qkv, stat, B, T, C, NH, NKV, causal, t);
}

/* fused: the blockwise ops context parallelism's ring uses, with one block of
 * every query against every key (Tq = Tk = T, shift 0: causal is the plain
 * mask), so the online softmax runs over the key tiles of one kernel and the
 * stat is each row's log-sum-exp [B, NH, T] (fp32). The ops read k and v
 * packed ([rows, K2] with K2 = dt_kv_cols: 2C, or 2 NKV hs under GQA;
 * kv_pack's layout, of the activations' type), so scratch ([B * T, 2 K2]
 * floats) holds them, then their gradient (fp32, from float B T K2 on), which
 * goes back into dqkv's k and v columns. Packed samples: the block's segment
 * ids are the rows' (docs->seg, [B][T]), for queries and keys alike. */
static void fused_forward(void *ctx, void *out, void *stat, float *scratch, const void *qkv, const model_docs *docs,
                          int B, int T, int C, int NH, int NKV, int causal, dt_dtype t)
{
    const model *m = ctx;
    int N = B * T, K2 = dt_kv_cols(C, NH, NKV), W = dt_qkv_cols(C, NH, NKV);
    const int *seg = docs ? docs->seg : NULL;
    m->ops->rows_copy(scratch, K2, act_at(m, qkv, (size_t)C), W, N, K2, 0, t);
    m->ops->attention_block_forward(out, stat, qkv, scratch, seg, seg, B, T, T, T, C, NH, NKV, causal, 0, t, t);
}

static void fused_backward(void *ctx, float *dqkv, float *scratch, const float *dout, const void *qkv,
                           const void *out, const void *stat, const model_docs *docs, int B, int T, int C, int NH,
                           int NKV, int causal, dt_dtype t)
{
    const int *seg = docs ? docs->seg : NULL;
    const model *m = ctx;
    const dt_ops *ops = m->ops;
    int N = B * T, K2 = dt_kv_cols(C, NH, NKV), W = dt_qkv_cols(C, NH, NKV);
    float *kv = scratch, *dkv = scratch + (size_t)N * (size_t)K2;
    ops->rows_copy(kv, K2, act_at(m, qkv, (size_t)C), W, N, K2, 0, t);
    ops->zero(dkv, (size_t)N * (size_t)K2 * sizeof(float));
    ops->attention_block_backward(dqkv, dkv, dout, out, stat, qkv, kv, seg, seg, B, T, T, T, C, NH, NKV, causal, 0,
                                  t);
    ops->rows_copy(dqkv + C, W, dkv, K2, N, K2, 1, DT_F32);
}

void model_local_attention(model *m, model_attention *out)
{
    if (m->spec.attention == ATTN_NAIVE)
        *out = (model_attention){.ctx = m, .forward = naive_forward, .backward = naive_backward};
    else
        *out = (model_attention){.ctx = m, .forward = fused_forward, .backward = fused_backward};
}

void model_local_layers(model *m, model_layers *out)
{
    *out = (model_layers){.ctx = m,
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
