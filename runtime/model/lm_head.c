/* lm_head.c — the chunked GPT LM head (model.h, model_vocab_head): how many
 * rows a chunk holds, the logits of one chunk, and the backward's part that
 * needs no other rank. The local layers (local_layers.c) and the
 * vocab-parallel ones (runtime/parallel/tp.c) run their forward's chunks
 * around these with their own reductions, and both call the same backward.
 *
 * The chunk size. A chunk's logits are [rows, V_l] fp32; the backward adds
 * dwte += dlogits^T x once per chunk, a GEMM whose inner dimension is the
 * chunk's rows and which reads and writes all of the [V_l, C] fp32 gradient
 * each time: 2 rows V_l C FLOPs over 8 V_l C bytes, rows / 4 FLOPs a byte. An
 * H100's bf16 GEMM needs ~300 to be compute- rather than memory-bound, so
 * 1024 rows (one GPT-2 sample, what the unchunked backward's loop used per
 * step) keep that GEMM near its peak, while the chunk itself stays small: GPT-2
 * at micro_batch 16 x 1024 tokens keeps 206 MB of logits instead of 3.3 GB.
 * Fewer rows would save little more memory (the head still keeps [N, C] and
 * [N] statistics) and cost time on every chunk. model.head_chunk_rows sets
 * another (a small one makes the chunking visible on a tiny test model). */
#include "runtime/model/model_internal.h"

int model_head_chunk_rows(const job_model *spec)
{
    return spec->head_chunk_rows > 0 ? spec->head_chunk_rows : MODEL_HEAD_CHUNK_ROWS;
}

void model_vocab_head_logits(const dt_ops *ops, const model_vocab_head *h, int r0, int n)
{
    ops->matmul_forward(h->logits, dt_at(h->x, (size_t)r0 * (size_t)h->C, h->t), h->wte, NULL, n, h->C, h->V_l,
                        h->t, DT_F32);
}

void model_vocab_head_stats_local(const dt_ops *ops, const model_vocab_head *h)
{
    int N = h->B * h->T;
    for (int r0 = 0; r0 < N; r0 += h->rows) {
        int n = N - r0 < h->rows ? N - r0 : h->rows;
        model_vocab_head_logits(ops, h, r0, n);
        ops->xent_stats(h->rowmax + r0, h->sumexp + r0, h->target + r0, h->logits, h->targets + r0, h->v0, n,
                        h->V_l);
    }
}

void model_vocab_head_backward_local(const dt_ops *ops, const model_vocab_head *h)
{
    int N = h->B * h->T, C = h->C, Vl = h->V_l;
    ops->zero(h->dx, (size_t)N * (size_t)C * sizeof(float));
    for (int r0 = 0; r0 < N; r0 += h->rows) {
        int n = N - r0 < h->rows ? N - r0 : h->rows;
        size_t r = (size_t)r0;
        /* the forward's logits again, then their gradient in their place
         * (xent_backward may write over its input: ops.h) */
        model_vocab_head_logits(ops, h, r0, n);
        ops->xent_backward(h->logits, h->logits, h->rowmax + r, h->sumexp + r, h->targets + r, h->dloss + r,
                           h->v0, n, Vl);
        ops->matmul_backward(h->dx + r * (size_t)C, h->dwte, NULL, h->logits, dt_at(h->x, r * (size_t)C, h->t),
                             h->wte, n, C, Vl, h->t);
    }
}
