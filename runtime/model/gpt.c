/* gpt.c — GPT's embedding (unit 0: wte vocab-parallel, wpe) and head (unit L+1:
 * final layernorm, LM head tied to wte, vocab-parallel cross-entropy); a
 * Llama's too (llama.c's model computes them here): no wpe (its positions
 * are rotary, in the blocks), a final RMSNorm, and its own LM head matrix
 * unless tie_embeddings (lm_head_w says which tensor the head multiplies by).
 *
 * Vocab parallelism: tp rank r holds wte rows [v0, v0 + V_l). The embedding and
 * the LM head with its loss are the model's layers (model_layers: the vocab-
 * parallel ones of a tp strategy, or the plain local ones), which never need a
 * full [N, V] row on one rank, nor the head its [N, V_l] logits at once: it
 * computes them in chunks of rows (model_vocab_head, lm_head.c). Batch arrays
 * (tokens, targets) are host memory, or device memory (model_batch.on_device);
 * they are copied into the activations' device buffers here.
 *
 * Sequence parallelism (model.h): the embedding writes this rank's rows of the
 * stream. The head's final layernorm runs on the rank's rows, which the LM head
 * gathers into the whole lnf its logits need; backward hands back the rank's
 * rows of d(lnf), and the layernorm's weight gradients are summed over tp.
 *
 * Context parallelism (model_shard.cp_*): the batch holds whole samples; this
 * rank takes the tokens and targets of its two chunks (model_cp_chunk) and
 * embeds them with their global positions, the wpe rows of those chunks.
 *
 * Packed samples (job_model.packed): the batch brings each token's position
 * in its sample and its segment; gpt_docs_from_batch puts this rank's rows'
 * positions and every cp rank's rows' segments into the micro-batch's stash,
 * where the embedding (wpe's row of each position), the blocks' RoPE and the
 * attention's document mask (model_docs) read them. */
#include "runtime/model/model_internal.h"

#include <stdio.h>
#include <stdlib.h>

/* The batch's [B, seq * cp] ids of this rank's rows into dst [B, seq]
 * (device), from the host or (model_batch.on_device) from device memory. */
static void ids_from_batch(model *m, int *dst, const int *ids, int B, int on_device)
{
    const model_dims *d = &m->d;
    void (*put)(void *, const void *, size_t) = on_device ? m->ops->copy : m->ops->from_host;
    if (d->cp_size == 1) {
        put(dst, ids, (size_t)B * (size_t)d->seq * sizeof(int));
        return;
    }
    size_t Tc = (size_t)d->seq / 2;
    for (size_t i = 0; i < (size_t)B * (size_t)d->seq; i += Tc)
        put(dst + i, ids + cp_global_row(d, i), Tc * sizeof(int));
}

void gpt_docs_from_batch(model *m, model_acts *a, const model_batch *batch)
{
    const model_dims *d = &m->d;
    if (!a->pos) return;
    if (!batch->positions || !batch->segments) {
        fprintf(stderr, "dtrun: model: a micro-batch of packed samples without their positions and segments\n");
        abort();
    }
    size_t N = (size_t)batch->B * (size_t)d->seq;
    for (size_t i = 0; i < N; i++) a->host_pos[i] = batch->positions[cp_global_row(d, i)];
    m->ops->from_host(a->pos, a->host_pos, N * sizeof(int));
    if (!a->seg) return;
    for (int r = 0; r < d->cp_size; r++)
        for (size_t i = 0; i < N; i++) a->host_seg[(size_t)r * N + i] = batch->segments[cp_row_of_rank(d, r, i)];
    m->ops->from_host(a->seg, a->host_seg, (size_t)d->cp_size * N * sizeof(int));
}

/* The wpe rows of this rank's chunks, one after the other, as the position
 * embedding of its local sequence: wpe itself without context parallelism,
 * or with packed samples (each row takes its own position's row: a->pos). */
static const float *local_wpe(model *m, model_acts *a)
{
    const model_dims *d = &m->d;
    if (m->spec.kind == MODEL_LLAMA) return NULL;
    const float *wpe = unit_tensor(m, 0, GPT_EMB_WPE);
    if (d->cp_size == 1 || a->pos) return wpe;
    size_t TcC = (size_t)d->seq / 2 * (size_t)d->C;
    for (int half = 0; half < 2; half++)
        m->ops->copy(a->wpe_l + half * TcC, wpe + (size_t)model_cp_chunk(d->cp_rank, d->cp_size, half) * TcC,
                     TcC * sizeof(float));
    return a->wpe_l;
}

void gpt_embedding_forward(model *m, model_acts *a, const model_batch *batch, float *out)
{
    const model_layers *L = &m->layers;
    const model_dims *d = &m->d;
    int B = batch->B;
    ids_from_batch(m, a->tokens, batch->tokens, B, batch->on_device);
    L->embedding_forward(L->ctx, out, a->bs.full, a->tokens, unit_tensor(m, 0, GPT_EMB_WTE), local_wpe(m, a), a->pos,
                         d->v0, d->V_l, B, d->seq, d->C);
}

void gpt_embedding_backward(model *m, model_acts *a, const float *dres, int B)
{
    const model_layers *L = &m->layers;
    const model_dims *d = &m->d;
    /* with the tied head in this object, the wte gradient collects in the
     * scratch that already holds the head's part (gpt_tied_grads_finish) */
    float *dwte = a->tied_dwte ? a->tied_dwte : unit_tensor_grad(m, 0, GPT_EMB_WTE);
    if (m->spec.kind == MODEL_LLAMA) {
        L->embedding_backward(L->ctx, dwte, NULL, dres, a->bs.full, a->tokens, NULL, d->v0, d->V_l, B, d->seq, d->C);
        return;
    }
    float *dwpe = unit_tensor_grad(m, 0, GPT_EMB_WPE);
    if (a->pos) { /* packed samples: each row's gradient into its position's row of wpe */
        L->embedding_backward(L->ctx, dwte, dwpe, dres, a->bs.full, a->tokens, a->pos, d->v0, d->V_l, B, d->seq,
                              d->C);
        return;
    }
    if (d->cp_size > 1) m->ops->zero(a->wpe_l, (size_t)d->seq * (size_t)d->C * sizeof(float));
    L->embedding_backward(L->ctx, dwte, d->cp_size > 1 ? a->wpe_l : dwpe, dres, a->bs.full, a->tokens, NULL,
                          d->v0, d->V_l, B, d->seq, d->C);
    if (d->cp_size == 1) return;
    /* this rank's positions' part: the other rows get theirs on the other cp ranks */
    size_t TcC = (size_t)d->seq / 2 * (size_t)d->C;
    for (int half = 0; half < 2; half++) {
        float *g = dwpe + (size_t)model_cp_chunk(d->cp_rank, d->cp_size, half) * TcC;
        m->ops->residual_forward(g, g, a->wpe_l + half * TcC, TcC, DT_F32);
    }
}

void gpt_tied_grads_finish(model *m, model_acts *a)
{
    int head = m->spec.n_layer + 1;
    size_t n = (size_t)m->d.V_l * (size_t)m->d.C;
    /* the head is no longer the unit being computed: its copy takes the sum
     * with the same rounding as unit 0's (bf16 gradients), so they stay equal */
    unit_grad_add(m, 0, GPT_EMB_WTE, a->tied_dwte, n);
    unit_grad_add(m, head, lm_head_w(m), a->tied_dwte, n);
}

/* The LM head's tensors of this micro-batch (wte, dwte: the unit's current
 * buffers, or dwte the tied scratch). The logits are one chunk's, in the
 * working set the micro-batches share: forward drops each chunk once its rows'
 * statistics are out, backward computes it again (model_vocab_head). */
static model_vocab_head vocab_head(model *m, model_acts *a, int B, float *dwte)
{
    const model_dims *d = &m->d;
    int head = m->spec.n_layer + 1;
    return (model_vocab_head){.B = B, .T = d->seq, .C = d->C, .v0 = d->v0, .V_l = d->V_l,
                              .rows = model_head_chunk_rows(&m->spec),
                              .wte = unit_weight(m, head, lm_head_w(m)), .dwte = dwte,
                              .t = m->act, .x_rows = act_at(m, a->lnf, rows_first(d, B) * (size_t)d->C), .x = a->lnf,
                              .targets = a->targets, .logits = a->logits, .rowmax = a->rowmax,
                              .sumexp = a->sumexp, .target = a->target, .loss = a->loss,
                              .dloss = a->dloss, .dx = a->bs.dln};
}

double gpt_head_forward(model *m, model_acts *a, const model_batch *batch, const void *x)
{
    const dt_ops *ops = m->ops;
    const model_layers *L = &m->layers;
    const model_dims *d = &m->d;
    int head = m->spec.n_layer + 1;
    int N = batch->B * d->seq, C = d->C, Nl = rows_local(d, batch->B);
    ids_from_batch(m, a->targets, batch->targets, batch->B, batch->on_device);
    /* this rank's rows of lnf; the head gathers every rank's (SP), in place */
    void *lnf_mine = act_at(m, a->lnf, rows_first(d, batch->B) * (size_t)C);
    model_norm_forward(m, lnf_mine, a->lnf_mean, a->lnf_rstd, x, unit_tensor(m, head, GPT_HEAD_LNF_W),
                       m->spec.kind == MODEL_LLAMA ? NULL : unit_tensor(m, head, GPT_HEAD_LNF_B), Nl);
    model_vocab_head h = vocab_head(m, a, batch->B, NULL);
    L->head_forward(L->ctx, &h);
    if (batch->loss_sum) { /* kept on the device: the host loop below, there */
        ops->loss_sum_add(batch->loss_sum, a->loss, N);
        return 0;
    }
    ops->to_host(a->host_loss, a->loss, (size_t)N * sizeof(float));
    double sum = 0;
    for (int i = 0; i < N; i++) sum += a->host_loss[i];
    return sum;
}

void gpt_head_backward(model *m, model_acts *a, const model_batch *batch, const void *x,
                       float *dres, float loss_scale)
{
    const dt_ops *ops = m->ops;
    const model_layers *L = &m->layers;
    const model_dims *d = &m->d;
    int head = m->spec.n_layer + 1;
    int N = batch->B * d->seq, C = d->C, Nl = rows_local(d, batch->B);
    if (batch->on_device) { /* from the targets the forward put on the device: the same rows */
        ops->loss_seed(a->dloss, a->targets, loss_scale, N);
    } else {
        for (int i = 0; i < N; i++)
            a->host_dloss[i] = batch->targets[cp_global_row(d, (size_t)i)] >= 0 ? loss_scale : 0.0f;
        ops->from_host(a->dloss, a->host_dloss, (size_t)N * sizeof(float));
    }

    float *dwte = unit_tensor_grad(m, head, lm_head_w(m));
    if (a->tied_dwte) {
        /* this micro-batch's head part, kept apart until the embedding adds its own */
        dwte = a->tied_dwte;
        ops->zero(dwte, (size_t)d->V_l * (size_t)C * sizeof(float));
    }
    model_vocab_head h = vocab_head(m, a, batch->B, dwte);
    const float *dlnf_mine = L->head_backward(L->ctx, &h);
    /* the final norm's gains (and a layernorm's biases) */
    int nln = m->spec.kind == MODEL_LLAMA ? 1 : 2;
    float *lng = model_ln_grads_begin(m, &a->bs, nln);
    float *ln_dst[2] = {unit_tensor_grad(m, head, GPT_HEAD_LNF_W), nln == 2 ? unit_tensor_grad(m, head, GPT_HEAD_LNF_B)
                                                                            : NULL};
    ops->zero(dres, (size_t)Nl * (size_t)C * sizeof(float));
    model_norm_backward(m, dres, lng ? lng : ln_dst[0], lng && nln == 2 ? lng + C : ln_dst[1], dlnf_mine, x,
                        unit_tensor(m, head, GPT_HEAD_LNF_W), a->lnf_mean, a->lnf_rstd, Nl);
    model_ln_grads_finish(m, &a->bs, ln_dst, nln);
}
