/* block.c — the pre-norm transformer block, forward and backward, on local
 * tensor-parallel shards (Megatron):
 *
 *   r2 = x  + proj(attn(qkv(ln1(x))))     qkv column-parallel, proj row-parallel
 *   y  = r2 + mproj(act(fc(ln2(r2))))     fc column-parallel, mproj row-parallel
 *
 * GPT and ViT: layernorms, biases, act the GELU of fc's output. Llama (the
 * pieces llama.c adds): RMSNorms, no biases, q and k turned by RoPE after the
 * qkv GEMM (its kv heads fewer than its query heads: GQA), and act SwiGLU of
 * fc's packed gate|up output (block_params names them by role, so the same
 * code computes both; model_internal.h's LLAMA_* say where they sit).
 *
 * The four matmuls go through the model's layers (model_layers: plain local
 * ones, or a tp strategy's, which add the collectives their kind needs);
 * everything else is local to this rank's heads, ffn columns and rows.
 *
 * With sequence parallelism (model.h) x, r2, y, the norm outputs and the
 * residual gradient hold this rank's rows only (N_l of the N); the layers take
 * those rows and the shared [N, C] scratch (block_scratch.full) to gather into
 * or reduce from. In backward the norm outputs are passed as rows again
 * where a weight gradient needs them (keeping them whole would spend the
 * memory SP saves). */
#include "runtime/model/model_internal.h"
#include "runtime/rng.h"

void block_bind(model *m, int unit, block_params *bp, int what)
{
    static const int gpt[BLK_ROLES] = {BLK_LN1_W, BLK_LN1_B, BLK_QKV_W, BLK_QKV_B, BLK_PROJ_W, BLK_PROJ_B,
                                       BLK_LN2_W, BLK_LN2_B, BLK_FC_W,  BLK_FC_B,  BLK_MPROJ_W, BLK_MPROJ_B,
                                       -1, -1, -1, -1, -1};
    /* Llama: the packed qkv starts at q, the packed gate|up at gate; no biases */
    static const int llama[BLK_ROLES] = {LLAMA_ATTN_NORM, -1, LLAMA_Q,    -1, LLAMA_O,    -1,
                                         LLAMA_MLP_NORM,  -1, LLAMA_GATE, -1, LLAMA_DOWN, -1,
                                         -1, -1, -1, -1, -1};
    /* an MoE block: the dense block's up to its second norm, then the MoE's
     * (model_internal.h MOE_*; the shared experts' only when there are) */
    static const int gpt_moe[BLK_ROLES] = {BLK_LN1_W, BLK_LN1_B, BLK_QKV_W, BLK_QKV_B, BLK_PROJ_W, BLK_PROJ_B,
                                           BLK_LN2_W, BLK_LN2_B, -1, -1, -1, -1,
                                           MOE_GPT_ROUTER, MOE_GPT_EXP_FC, MOE_GPT_EXP_PROJ, MOE_GPT_SH_FC,
                                           MOE_GPT_SH_PROJ};
    static const int llama_moe[BLK_ROLES] = {LLAMA_ATTN_NORM, -1, LLAMA_Q, -1, LLAMA_O, -1,
                                             LLAMA_MLP_NORM,  -1, -1, -1, -1, -1,
                                             MOE_LLAMA_ROUTER, MOE_LLAMA_EXP_GATE_UP, MOE_LLAMA_EXP_DOWN,
                                             MOE_LLAMA_SH_GATE, MOE_LLAMA_SH_DOWN};
    int llama_kind = m->spec.kind == MODEL_LLAMA, moe = block_is_moe(m, unit);
    const int *at = moe ? (llama_kind ? llama_moe : gpt_moe) : llama_kind ? llama : gpt;
    int shared = m->d.Fs > 0;
    for (int r = 0; r < BLK_ROLES; r++) {
        int i = at[r];
        if ((r == BR_SH_FC_W || r == BR_SH_PROJ_W) && !shared) i = -1;
        bp->p[r] = i < 0 || !(what & BIND_PARAMS) ? NULL : unit_tensor(m, unit, i);
        bp->w[r] = i < 0 || !(what & BIND_PARAMS) ? NULL : unit_weight(m, unit, i);
        bp->g[r] = i < 0 || !(what & BIND_GRADS) ? NULL : unit_tensor_grad(m, unit, i);
    }
    /* train.lora's adapters, A then B per target, after the base tensors */
    for (int t = 0; t < LORA_N_TARGETS; t++) bp->la[t] = bp->lb[t] = NULL, bp->gla[t] = bp->glb[t] = NULL;
    for (int k = 0, first = model_lora_first(&m->spec, unit); k < lora_count(&m->spec); k++) {
        int t = lora_target(&m->spec, k), i = first + 2 * k;
        if (what & BIND_PARAMS) bp->la[t] = unit_weight(m, unit, i), bp->lb[t] = unit_weight(m, unit, i + 1);
        if (what & BIND_GRADS) bp->gla[t] = unit_tensor_grad(m, unit, i), bp->glb[t] = unit_tensor_grad(m, unit, i + 1);
    }
}

const model_lora *block_lora(model *m, int unit, lora_layer layer, const block_params *bp, const model_lora *s,
                             model_lora *out)
{
    const model_dims *d = &m->d;
    const job_lora *lo = &m->spec.lora;
    if (!job_lora_on(&m->spec)) return NULL;
    /* each layer's targets and, for a column-parallel one, their columns of
     * its (packed) output: qkv's q, k, v; a Llama's gate|up */
    static const int targets[4][LORA_PER_LAYER] = {
        [LORA_LAYER_QKV] = {0, 1, 2}, [LORA_LAYER_PROJ] = {3, -1, -1},
        [LORA_LAYER_FC] = {4, 5, -1}, [LORA_LAYER_MPROJ] = {6, -1, -1}};
    int col0[LORA_N_TARGETS] = {0, d->C_l, d->C_l + d->Ckv_l, 0, 0, m->spec.kind == MODEL_LLAMA ? d->F_l : 0, 0};
    int cols[LORA_N_TARGETS] = {d->C_l, d->Ckv_l, d->Ckv_l, d->C, d->F_l, d->F_l, d->C};
    *out = *s;
    out->n = 0;
    out->r = lo->rank;
    out->scale = (float)(lo->alpha / lo->rank);
    out->p = m->lora_step > 0 ? (float)lo->dropout : 0.0f;
    int row = layer == LORA_LAYER_PROJ || layer == LORA_LAYER_MPROJ;
    /* the input's place in the whole layer's input, for the dropout's draws */
    out->feats = layer == LORA_LAYER_MPROJ ? m->spec.d_ff : d->C;
    out->feat0 = !row ? 0 : layer == LORA_LAYER_PROJ ? (long long)d->C_l * m->shard.tp_rank
                                                      : (long long)split_lo((size_t)m->spec.d_ff, m->shard.tp_rank,
                                                                            m->shard.tp_size);
    for (int j = 0; j < LORA_PER_LAYER; j++) {
        int t = targets[layer][j];
        if (t < 0 || !bp->la[t]) continue;
        /* the dropout's draws: (seed, step) and which adapter of which layer */
        uint64_t key = rng_key3(m->seed, "lora.dropout", (uint64_t)m->lora_step,
                                (uint64_t)(unit - 1) * LORA_N_TARGETS + (uint64_t)t);
        out->ad[out->n++] = (lora_adapter){.A = bp->la[t], .B = bp->lb[t], .dA = bp->gla[t], .dB = bp->glb[t],
                                           .col0 = col0[t], .cols = cols[t], .key = key};
    }
    return out->n ? out : NULL;
}

/* ---- the norms: layernorm (GPT, ViT) or RMSNorm (Llama, no mean or bias) ---- */

void model_norm_forward(model *m, void *out, float *mean, float *rstd, const void *x, const float *w,
                        const float *b, int N)
{
    if (m->spec.kind == MODEL_LLAMA) m->ops->rmsnorm_forward(out, rstd, x, w, N, m->d.C, model_norm_eps(m), m->act);
    else m->ops->layernorm_forward(out, mean, rstd, x, w, b, N, m->d.C, model_norm_eps(m), m->act);
}

void model_norm_backward(model *m, float *dx, float *dw, float *db, const float *dout, const void *x,
                         const float *w, const float *mean, const float *rstd, int N)
{
    if (m->spec.kind == MODEL_LLAMA) m->ops->rmsnorm_backward(dx, dw, dout, x, w, rstd, N, m->d.C, m->act);
    else m->ops->layernorm_backward(dx, dw, db, dout, x, w, mean, rstd, N, m->d.C, m->act);
}

/* res = a + b and its norm, in one pass where the backend fuses them (the
 * same bits as the two ops on the CPU). */
static void residual_norm_forward(model *m, void *res, void *out, float *mean, float *rstd, const float *a,
                                  const void *b, const float *w, const float *bias, int N)
{
    if (m->spec.kind == MODEL_LLAMA)
        m->ops->residual_rmsnorm_forward(res, out, rstd, a, b, w, N, m->d.C, model_norm_eps(m), m->act);
    else
        m->ops->residual_layernorm_forward(res, out, mean, rstd, a, b, w, bias, N, m->d.C, model_norm_eps(m),
                                           m->act);
}

/* ---- the MLP's activation: GELU of fc's output, or SwiGLU of gate|up ---- */

void block_mlp_in(model *m, const model_layers *L, void *h, void *g, const void *in, void *full, const void *w,
                  const float *b, int N, int H, int F, const model_lora *lo)
{
    int C = m->d.C;
    dt_dtype t = m->act;
    if (m->spec.kind == MODEL_LLAMA) { /* one GEMM for gate and up, then SiLU(gate) * up */
        L->column_forward(L->ctx, h, in, full, w, NULL, N, C, H, t, lo);
        m->ops->swiglu_forward(g, h, N, F, t);
    } else if (m->spec.activation == ACT_GELU || lo) {
        /* The exact GELU: no GEMM epilogue computes it; nor the sum of the
         * GEMM and an adapter's delta (the GELU then reads the stored pre-activation). */
        L->column_forward(L->ctx, h, in, full, w, b, N, C, F, t, lo);
        model_gelu_forward(m, g, h, (size_t)N * (size_t)F);
    } else {
        /* GPT-2's tanh GELU in the fc GEMM's epilogue (same bits on the CPU).
         * bf16: the GELU reads the fp32 pre-activation, as cuBLASLt's
         * GELU_AUX_BIAS epilogue reads its accumulator, and both outputs are
         * rounded once where they are stored; a different rounding point than
         * the two ops', a different trajectory, not a different accuracy (the
         * quickstart_bf16 test compares smoothed curves against fp32's
         * seed-to-seed spread). */
        L->column_gelu_forward(L->ctx, g, h, in, full, w, b, N, C, F, t);
    }
}

void block_mlp_out_backward(model *m, const model_layers *L, const void *h, const void *g, const void *w, float *dw,
                            float *db, const float *dout, void *full, float *dh, float *dg, int N, int H, int F,
                            const model_lora *lo)
{
    int C = m->d.C;
    dt_dtype t = m->act;
    size_t NF = (size_t)N * (size_t)F;
    if (m->spec.kind == MODEL_LLAMA) {
        L->row_backward(L->ctx, dg, dw, NULL, dout, full, g, w, N, F, C, t, lo);
        m->ops->zero(dh, (size_t)N * (size_t)H * sizeof(float));
        m->ops->swiglu_backward(dh, h, dg, N, F, t);
    } else if (m->spec.activation == ACT_GELU || lo) { /* the adapter's part joins before the GELU's */
        L->row_backward(L->ctx, dg, dw, db, dout, full, g, w, N, F, C, t, lo);
        m->ops->zero(dh, NF * sizeof(float));
        model_gelu_backward(m, dh, h, dg, NF);
    } else {
        /* GPT-2's tanh GELU in the mlp projection's input-gradient GEMM (a
         * DGELU epilogue on cuda; the same bits as the two steps on the CPU).
         * It reads the kept pre-activation, rounded under bf16 as the GELU's
         * backward always has, so both precisions take it. */
        L->row_dgelu_backward(L->ctx, dh, dg, dw, db, dout, full, g, w, h, N, F, C, t);
    }
}

/* Elementwise recompute (train.recompute: elementwise): a block set whose
 * norm outputs (and a dense Llama block's SwiGLU product) point at the working
 * set's one copy (block_scratch el_ln, el_act): forward writes them there for
 * the GEMMs that read them, backward rebuilds them there before those GEMMs'
 * backward. Otherwise a itself. */
static const block_acts *el_set(const model *m, int unit, const block_acts *a, const block_scratch *s,
                                block_acts *r)
{
    if (m->recompute != RECOMPUTE_ELEMENTWISE || !s->el_ln) return a;
    *r = *a;
    r->ln1 = r->ln2 = s->el_ln;
    if (s->el_act && !block_is_moe(m, unit)) r->fchg = s->el_act;
    return r;
}

void block_forward(model *m, int unit, const void *x, void *y, block_acts *a_in,
                   const block_scratch *s, int B, int recomputing)
{
    block_acts el;
    block_acts *a = (block_acts *)el_set(m, unit, a_in, s, &el);
    const dt_ops *ops = m->ops;
    const model_layers *L = &m->layers;
    const model_dims *d = &m->d;
    int N = B * d->seq, C = d->C, T = d->seq, Nl = rows_local(d, B);
    int causal = m->spec.kind != MODEL_VIT;
    size_t NlC = (size_t)Nl * (size_t)C;
    dt_dtype t = m->act;
    block_params bp;
    block_bind(m, unit, &bp, BIND_PARAMS);

    /* Every tensor the backward reads is written in the activations' type
     * (bf16: rounded once, where it is written, so the matmuls read bf16
     * inputs and the backward what the stash keeps); statistics are fp32.
     * The row layers' output is fp32 (summed over the group first): in fp32
     * it is written in place of its residual sum, in bf16 into the scratch,
     * and the residual add rounds the sum. */
    model_lora lb;
    model_norm_forward(m, a->ln1, a->ln1_mean, a->ln1_rstd, x, bp.p[BR_LN1_W], bp.p[BR_LN1_B], Nl);
    L->column_forward(L->ctx, a->qkv, a->ln1, s->full, bp.w[BR_QKV_W], bp.p[BR_QKV_B], N, C, d->W_l, t,
                      block_lora(m, unit, LORA_LAYER_QKV, &bp, &s->lora, &lb));
    if (m->spec.kind == MODEL_LLAMA) llama_rope_forward(m, a->qkv, s, N);
    const model_docs *docs = s->docs.seg ? &s->docs : NULL; /* packed samples */
    m->attn.forward(m->attn.ctx, a->atty, a->att, s->att_scratch, a->qkv, docs, B, T, d->C_l, d->NH_l, d->NKV_l,
                    causal, t);
    float *branch = t == DT_F32 ? (float *)a->r2 : s->dln;
    L->row_forward(L->ctx, branch, s->full, a->atty, bp.w[BR_PROJ_W], bp.p[BR_PROJ_B], N, d->C_l, C, t,
                   block_lora(m, unit, LORA_LAYER_PROJ, &bp, &s->lora, &lb));
    /* r2 = x + the attention branch, and ln2 of it */
    residual_norm_forward(m, a->r2, a->ln2, a->ln2_mean, a->ln2_rstd, branch, x, bp.p[BR_LN2_W], bp.p[BR_LN2_B], Nl);
    branch = recomputing ? NULL : t == DT_F32 ? (float *)y : s->dln;
    if (block_is_moe(m, unit)) {
        /* the routed experts (and the shared ones) in place of the MLP */
        moe_bufs mb = moe_bufs_of(a, s);
        moe_forward(m, unit, &bp, &mb, a->ln2, branch, N, T, !recomputing);
        if (branch) ops->residual_forward(y, branch, a->r2, NlC, t);
        return;
    }
    block_mlp_in(m, L, a->fch, a->fchg, a->ln2, s->full, bp.w[BR_FC_W], bp.p[BR_FC_B], N, d->H_l, d->F_l,
                 block_lora(m, unit, LORA_LAYER_FC, &bp, &s->lora, &lb));
    if (recomputing) return; /* the backward reads nothing past this point */
    L->row_forward(L->ctx, branch, s->full, a->fchg, bp.w[BR_MPROJ_W], bp.p[BR_MPROJ_B], N, d->F_l, C, t,
                   block_lora(m, unit, LORA_LAYER_MPROJ, &bp, &s->lora, &lb));
    ops->residual_forward(y, branch, a->r2, NlC, t);
}

/* The qkv layer's backward: the input gradient, and the weight gradient
 * (dw, db: NULL in a zero-bubble B pass). A Llama whose kv heads are
 * replicated over tp ranks (tp above n_kv_head) computes this micro-batch's
 * weight gradient apart (llama_qkv_wgrad: each replica's k and v rows hold its
 * own query heads' part, which the replicas sum). */
static const float *qkv_backward(model *m, int unit, const block_params *bp, const block_acts *a,
                                 const block_scratch *s, const float *dqkv, float *dw, float *db, int N)
{
    const model_layers *L = &m->layers;
    const model_dims *d = &m->d;
    float *dw_mb = dw && d->kv_replicas > 1 ? llama_qkv_wgrad_begin(m, s) : dw;
    model_lora lb;
    const float *din = L->column_backward(L->ctx, s->dln, dw_mb, db, dqkv, a->ln1, s->full, bp->w[BR_QKV_W], N, d->C,
                                          d->W_l, m->act, block_lora(m, unit, LORA_LAYER_QKV, bp, &s->lora, &lb));
    if (dw_mb != dw) llama_qkv_wgrad_finish(m, unit, s);
    return din;
}

void block_backward(model *m, int unit, float *dres, const void *x, const block_acts *a,
                    const block_scratch *s, int B, const block_wkeep *keep)
{
    dt_dtype t = m->act;
    const dt_ops *ops = m->ops;
    const model_layers *L = &m->layers;
    const model_dims *d = &m->d;
    int N = B * d->seq, C = d->C, T = d->seq, Nl = rows_local(d, B);
    int causal = m->spec.kind != MODEL_VIT;
    block_params bp;
    block_bind(m, unit, &bp, BIND_PARAMS | BIND_GRADS);
    block_acts el;
    const block_acts *kept = a;
    a = el_set(m, unit, kept, s, &el);
    int rebuild = a != kept; /* elementwise recompute: ln2, the SwiGLU product, ln1 */
    if (keep) /* the matmuls' weight gradients wait for the W pass (block_backward_weight) */
        for (int r = 0; r < BLK_ROLES; r++)
            if (r != BR_LN1_W && r != BR_LN1_B && r != BR_LN2_W && r != BR_LN2_B) bp.g[r] = NULL;
    /* norm gradients: straight into the unit's, or (SP) this rank's part of
     * them into the scratch, in the order of ln_dst (a Llama's RMSNorms have
     * gains only: two of them) */
    int llama = m->spec.kind == MODEL_LLAMA, nln = llama ? 2 : 4;
    float *lng = model_ln_grads_begin(m, s, nln);
    float *ln_dst[4] = {bp.g[BR_LN1_W], bp.g[BR_LN1_B], bp.g[BR_LN2_W], bp.g[BR_LN2_B]};
    if (llama) ln_dst[1] = ln_dst[2], ln_dst[2] = NULL;
    float *ln1_dw = lng ? lng : ln_dst[0], *ln1_db = lng && !llama ? lng + (size_t)C : bp.g[BR_LN1_B];
    float *ln2_dw = lng ? lng + (size_t)(llama ? 1 : 2) * (size_t)C : bp.g[BR_LN2_W];
    float *ln2_db = lng && !llama ? lng + 3 * (size_t)C : bp.g[BR_LN2_B];

    /* dres = dL/dy. y = r2 + mlp(r2): the MLP branch sees dy; dL/dr2 = dy + (MLP's
     * input gradient), accumulated into dres in place by the ln2 backward.
     * An MoE block's MLP is the mixture of experts (moe.c). */
    float *dfchg = s->dA, *dfch = s->dB;
    /* (keep's tensors may be kept ones this block reads: each is written once dead) */
    model_lora lb;
    const float *dln2;
    if (rebuild) { /* ln2 from the kept r2 (its statistics again, the same values) */
        model_norm_forward(m, a->ln2, a->ln2_mean, a->ln2_rstd, a->r2, bp.p[BR_LN2_W], bp.p[BR_LN2_B], Nl);
        if (a->fchg != kept->fchg) m->ops->swiglu_forward(a->fchg, a->fch, N, d->F_l, t);
    }
    if (block_is_moe(m, unit)) { /* no zero-bubble split (model_acts_create_split refuses it) */
        moe_bufs mb = moe_bufs_of(a, s);
        dln2 = moe_backward(m, unit, &bp, &mb, s, a->ln2, dres, s->dln, N, T);
    } else {
        if (keep) ops->copy(keep->dy, dres, (size_t)N * (size_t)C * sizeof(float));
        block_mlp_out_backward(m, L, a->fch, a->fchg, bp.w[BR_MPROJ_W], bp.g[BR_MPROJ_W], bp.g[BR_MPROJ_B], dres,
                               s->full, dfch, dfchg, N, d->H_l, d->F_l,
                               block_lora(m, unit, LORA_LAYER_MPROJ, &bp, &s->lora, &lb));
        if (keep) ops->copy(keep->dfch, dfch, (size_t)N * (size_t)d->H_l * sizeof(float));
        /* s->full is free again: dy is used up */
        dln2 = L->column_backward(L->ctx, s->dln, bp.g[BR_FC_W], bp.g[BR_FC_B], dfch, a->ln2, s->full, bp.w[BR_FC_W],
                                  N, C, d->H_l, t, block_lora(m, unit, LORA_LAYER_FC, &bp, &s->lora, &lb));
    }
    model_norm_backward(m, dres, ln2_dw, ln2_db, dln2, a->r2, bp.p[BR_LN2_W], a->ln2_mean, a->ln2_rstd, Nl);

    /* dres = dL/dr2. r2 = x + attn(x): same pattern. */
    float *datty = s->dB, *dqkv = s->dA;
    size_t NW = (size_t)N * (size_t)d->W_l;
    if (keep) ops->copy(keep->dr2, dres, (size_t)N * (size_t)C * sizeof(float));
    L->row_backward(L->ctx, datty, bp.g[BR_PROJ_W], bp.g[BR_PROJ_B], dres, s->full, a->atty,
                    bp.w[BR_PROJ_W], N, d->C_l, C, t, block_lora(m, unit, LORA_LAYER_PROJ, &bp, &s->lora, &lb));
    if (s->att_shared) { /* selective recompute, naive attention (the lse kinds keep no probabilities) */
        /* att_shared holds whichever block's probabilities were computed last:
         * rebuild this block's from its kept qkv (same kernel, same inputs, so
         * the same bits as its forward's). The attention output is not needed
         * again (atty is kept); dA, free until it becomes dqkv below, takes it. */
        ops->attention_forward(dqkv, s->att_shared, a->qkv, B, T, d->C_l, d->NH_l, d->NKV_l, causal, t);
    }
    ops->zero(dqkv, NW * sizeof(float));
    m->attn.backward(m->attn.ctx, dqkv, s->att_scratch, datty, a->qkv, a->atty, a->att,
                     s->docs.seg ? &s->docs : NULL, B, T, d->C_l, d->NH_l, d->NKV_l, causal, t);
    /* the gradient of q and k before their rotation */
    if (llama) llama_rope_backward(m, dqkv, s, N);
    if (keep) ops->copy(keep->dqkv, dqkv, NW * sizeof(float));
    /* ln1 from the block's input, where ln2 was (dead since fc's backward) */
    if (rebuild) model_norm_forward(m, a->ln1, a->ln1_mean, a->ln1_rstd, x, bp.p[BR_LN1_W], bp.p[BR_LN1_B], Nl);
    /* s->full is free again: dr2 is used up */
    const float *dln1 = qkv_backward(m, unit, &bp, a, s, dqkv, bp.g[BR_QKV_W], bp.g[BR_QKV_B], N);
    model_norm_backward(m, dres, ln1_dw, ln1_db, dln1, x, bp.p[BR_LN1_W], a->ln1_mean, a->ln1_rstd, Nl);
    /* before after(BACKWARD): the strategies take the unit's gradients as final there */
    model_ln_grads_finish(m, s, ln_dst, nln);
}
