/* decode.c — one decoding step through the whole GPT (model.h): the block
 * forward of block.c for a single row, its q, k, v appended to the block's
 * cache and its attention the new query over every cached key. The matmuls go
 * through the model's layers, so under tensor parallelism the column- and
 * row-parallel collectives happen exactly as in training; the LM head computes
 * this rank's vocabulary rows (the caller gathers them over tp if it wants
 * the whole distribution). Same ops, same order of operations per row as the
 * training forward, so the logits are the ones a forward of the whole prefix
 * gives (up to the summation order of attention over keys). */
#include "runtime/model/kv_cache.h"

void model_vocab_rows(const model *m, int *v0, int *V_l)
{
    *v0 = m->d.v0;
    *V_l = m->d.V_l;
}

static void block_step(model *m, model_kv *kv, int b, int pos)
{
    const dt_ops *ops = m->ops;
    const model_layers *L = &m->layers;
    const model_dims *d = &m->d;
    int unit = m->first_block + b, C = d->C;
    model_hook_before(m, unit, PHASE_FORWARD);
    const float *ln1w = unit_tensor(m, unit, BLK_LN1_W), *ln1b = unit_tensor(m, unit, BLK_LN1_B);
    size_t C2l = (size_t)dt_kv_cols(d->C_l, d->NH_l, d->NH_l);
    ops->layernorm_forward(kv->ln, kv->mean, kv->rstd, kv->x, ln1w, ln1b, 1, C, model_norm_eps(m), DT_F32);
    L->column_forward(L->ctx, kv->qkv, kv->ln, NULL, unit_tensor(m, unit, BLK_QKV_W), unit_tensor(m, unit, BLK_QKV_B),
                      1, C, 3 * d->C_l, DT_F32);
    /* this position's k and v (contiguous after q) into the cache's row pos */
    ops->copy(kv->cache[b] + (size_t)pos * C2l, kv->qkv + d->C_l, C2l * sizeof(float));
    ops->attention_decode(kv->atty, kv->scratch, kv->qkv, kv->cache[b], pos + 1, d->C_l, d->NH_l, d->NH_l, DT_F32);
    L->row_forward(L->ctx, kv->r2, NULL, kv->atty, unit_tensor(m, unit, BLK_PROJ_W), unit_tensor(m, unit, BLK_PROJ_B),
                   1, d->C_l, C, DT_F32);
    ops->residual_forward(kv->r2, kv->r2, kv->x, (size_t)C, DT_F32);
    ops->layernorm_forward(kv->ln, kv->mean, kv->rstd, kv->r2, unit_tensor(m, unit, BLK_LN2_W),
                           unit_tensor(m, unit, BLK_LN2_B), 1, C, model_norm_eps(m), DT_F32);
    L->column_forward(L->ctx, kv->fch, kv->ln, NULL, unit_tensor(m, unit, BLK_FC_W), unit_tensor(m, unit, BLK_FC_B), 1,
                      C, d->F_l, DT_F32);
    model_gelu_forward(m, kv->fchg, kv->fch, (size_t)d->F_l);
    L->row_forward(L->ctx, kv->y, NULL, kv->fchg, unit_tensor(m, unit, BLK_MPROJ_W),
                   unit_tensor(m, unit, BLK_MPROJ_B), 1, d->F_l, C, DT_F32);
    ops->residual_forward(kv->y, kv->y, kv->r2, (size_t)C, DT_F32);
    model_hook_after(m, unit, PHASE_FORWARD);
    float *t = kv->x; /* the block's output is the next one's input */
    kv->x = kv->y;
    kv->y = t;
}

int model_decode_step(model *m, model_kv *kv, int token, float *logits)
{
    if (kv->len >= kv->cap) return -1;
    const dt_ops *ops = m->ops;
    const model_layers *L = &m->layers;
    const model_dims *d = &m->d;
    int pos = kv->len, C = d->C, head = m->spec.n_layer + 1;
    ops->from_host(kv->tok, &token, sizeof token);
    model_hook_before(m, 0, PHASE_FORWARD);
    /* wpe's row `pos`: the embedding of one token at position 0 of a
     * sequence that starts there */
    L->embedding_forward(L->ctx, kv->x, NULL, kv->tok, unit_tensor(m, 0, GPT_EMB_WTE),
                         unit_tensor(m, 0, GPT_EMB_WPE) + (size_t)pos * (size_t)C, d->v0, d->V_l, 1, 1, C);
    model_hook_after(m, 0, PHASE_FORWARD);
    for (int b = 0; b < m->n_blocks; b++) block_step(m, kv, b, pos);
    model_hook_before(m, head, PHASE_FORWARD);
    ops->layernorm_forward(kv->lnf, kv->mean, kv->rstd, kv->x, unit_tensor(m, head, GPT_HEAD_LNF_W),
                           unit_tensor(m, head, GPT_HEAD_LNF_B), 1, C, model_norm_eps(m), DT_F32);
    ops->matmul_forward(logits, kv->lnf, unit_tensor(m, head, GPT_HEAD_WTE), NULL, 1, C, d->V_l, DT_F32, DT_F32);
    model_hook_after(m, head, PHASE_FORWARD);
    kv->len++;
    return 0;
}
