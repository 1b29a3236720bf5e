/* decode.c — one decoding step through the held units (model.h): the block
 * forward of block.c for a single row, its k and v appended to the block's
 * cache and its attention the new query over every cached key. The matmuls go
 * through the model's layers, so under tensor parallelism the column- and
 * row-parallel collectives happen exactly as in training; the LM head computes
 * this rank's vocabulary rows (the caller gathers them over tp if it wants
 * the whole distribution). Same ops, same order of operations per row as the
 * training forward, so the logits are the ones a forward of the whole prefix
 * gives (up to the summation order of attention over keys).
 *
 * A GPT adds wpe's row of the position; a Llama turns the row's q and k by
 * RoPE at it (the cache keeps the turned k, as training's attention reads
 * it), its norms are RMSNorms, its MLP SwiGLU, its cache holds its kv heads
 * only. A pipeline stage holds some units: without the embedding its input
 * row is what the caller put in model_kv_row, without the head its output row
 * is left there. */
#include "runtime/model/kv_cache.h"

void model_vocab_rows(const model *m, int *v0, int *V_l)
{
    *v0 = m->d.v0;
    *V_l = m->d.V_l;
}

float *model_kv_row(model_kv *kv) { return kv->x; }

static void block_step(model *m, model_kv *kv, int b, int pos)
{
    const dt_ops *ops = m->ops;
    const model_layers *L = &m->layers;
    const model_dims *d = &m->d;
    int unit = m->first_block + b, C = d->C, llama = m->spec.kind == MODEL_LLAMA;
    model_hook_before(m, unit, PHASE_FORWARD);
    block_params bp;
    block_bind(m, unit, &bp, BIND_PARAMS);
    model_lora lb; /* train.lora's adapters, on one row (no dropout: m->lora_step is 0) */
    size_t K2 = (size_t)dt_kv_cols(d->C_l, d->NH_l, d->NKV_l);
    model_norm_forward(m, kv->ln, kv->mean, kv->rstd, kv->x, bp.p[BR_LN1_W], bp.p[BR_LN1_B], 1);
    L->column_forward(L->ctx, kv->qkv, kv->ln, NULL, bp.w[BR_QKV_W], bp.p[BR_QKV_B], 1, C, d->W_l, DT_F32,
                      block_lora(m, unit, LORA_LAYER_QKV, &bp, &kv->lora, &lb));
    if (llama) ops->rope_forward(kv->qkv, d->W_l, d->NH_l + d->NKV_l, d->hs, kv->pos, kv->rope_cs, 1, DT_F32);
    /* this position's k and v (contiguous after q) into the cache's row pos */
    ops->copy(kv->cache[b] + (size_t)pos * K2, kv->qkv + d->C_l, K2 * sizeof(float));
    ops->attention_decode(kv->atty, kv->scratch, kv->qkv, kv->cache[b], pos + 1, d->C_l, d->NH_l, d->NKV_l, DT_F32);
    L->row_forward(L->ctx, kv->r2, NULL, kv->atty, bp.w[BR_PROJ_W], bp.p[BR_PROJ_B], 1, d->C_l, C, DT_F32,
                   block_lora(m, unit, LORA_LAYER_PROJ, &bp, &kv->lora, &lb));
    ops->residual_forward(kv->r2, kv->r2, kv->x, (size_t)C, DT_F32);
    model_norm_forward(m, kv->ln, kv->mean, kv->rstd, kv->r2, bp.p[BR_LN2_W], bp.p[BR_LN2_B], 1);
    if (block_is_moe(m, unit)) { /* the row's experts, as training routes it (one sample of one token) */
        moe_forward(m, unit, &bp, &kv->moe, kv->ln, kv->y, 1, 1, 0);
    } else {
        L->column_forward(L->ctx, kv->fch, kv->ln, NULL, bp.w[BR_FC_W], bp.p[BR_FC_B], 1, C, d->H_l, DT_F32,
                          block_lora(m, unit, LORA_LAYER_FC, &bp, &kv->lora, &lb));
        if (llama) ops->swiglu_forward(kv->fchg, kv->fch, 1, d->F_l, DT_F32);
        else model_gelu_forward(m, kv->fchg, kv->fch, (size_t)d->F_l);
        L->row_forward(L->ctx, kv->y, NULL, kv->fchg, bp.w[BR_MPROJ_W], bp.p[BR_MPROJ_B], 1, d->F_l, C, DT_F32,
                       block_lora(m, unit, LORA_LAYER_MPROJ, &bp, &kv->lora, &lb));
    }
    ops->residual_forward(kv->y, kv->y, kv->r2, (size_t)C, DT_F32);
    model_hook_after(m, unit, PHASE_FORWARD);
    float *t = kv->x; /* the block's output is the next one's input */
    kv->x = kv->y;
    kv->y = t;
}

int model_decode_step(model *m, model_kv *kv, int token, float *logits)
{
    if (kv->len >= kv->cap) return -1;
    m->lora_step = 0; /* train.lora: no dropout in decoding (a training step may have run before) */
    const dt_ops *ops = m->ops;
    const model_layers *L = &m->layers;
    const model_dims *d = &m->d;
    int pos = kv->len, C = d->C, head = m->spec.n_layer + 1, llama = m->spec.kind == MODEL_LLAMA;
    if (llama && m->n_blocks > 0) ops->from_host(kv->pos, &pos, sizeof pos);
    if (m->has_emb) {
        ops->from_host(kv->tok, &token, sizeof token);
        model_hook_before(m, 0, PHASE_FORWARD);
        /* GPT: wpe's row `pos`, the embedding of one token at position 0 of a
         * sequence that starts there; a Llama has none */
        const float *wpe = llama ? NULL : unit_tensor(m, 0, GPT_EMB_WPE) + (size_t)pos * (size_t)C;
        L->embedding_forward(L->ctx, kv->x, NULL, kv->tok, unit_tensor(m, 0, GPT_EMB_WTE), wpe, NULL, d->v0, d->V_l,
                             1, 1, C);
        model_hook_after(m, 0, PHASE_FORWARD);
    }
    for (int b = 0; b < m->n_blocks; b++) block_step(m, kv, b, pos);
    if (m->has_head) {
        model_hook_before(m, head, PHASE_FORWARD);
        model_norm_forward(m, kv->lnf, kv->mean, kv->rstd, kv->x, unit_tensor(m, head, GPT_HEAD_LNF_W),
                           llama ? NULL : unit_tensor(m, head, GPT_HEAD_LNF_B), 1);
        ops->matmul_forward(logits, kv->lnf, unit_tensor(m, head, lm_head_w(m)), NULL, 1, C, d->V_l, DT_F32, DT_F32);
        model_hook_after(m, head, PHASE_FORWARD);
    }
    kv->len++;
    return 0;
}
