/* params.c — the parameter specs of GPT, ViT and Llama: names, global and
 * local shapes, how each splits under tensor parallelism, where it sits in its
 * unit's flat buffer, how it is initialized; plus the model's size and FLOP
 * formulas. Pure functions of the job's model section: the dry-run calls them
 * too. */
#include "runtime/model/model_internal.h"
#include "runtime/model/lora.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

size_t split_lo(size_t n, int r, int tp) { return n * (size_t)r / (size_t)tp; }
size_t split_len(size_t n, int r, int tp) { return split_lo(n, r + 1, tp) - split_lo(n, r, tp); }

int model_n_units(const job_model *spec) { return spec->n_layer + 2; }

int model_seq_len(const job_model *spec)
{
    if (job_model_is_lm(spec)) return spec->seq_len;
    int side = spec->image_size / spec->patch_size;
    return side * side + 1;
}

void model_dims_of(const job_model *spec, const model_shard *sh, model_dims *d)
{
    int tp_rank = sh->tp_rank, tp_size = sh->tp_size;
    memset(d, 0, sizeof *d);
    d->C = spec->d_model;
    d->NH_l = (int)split_len((size_t)spec->n_head, tp_rank, tp_size);
    d->hs = spec->d_model / spec->n_head;
    d->C_l = d->NH_l * d->hs;
    d->F_l = (int)split_len((size_t)spec->d_ff, tp_rank, tp_size);
    d->H_l = spec->kind == MODEL_LLAMA ? 2 * d->F_l : d->F_l;
    /* key/value heads: split like the query heads, or (tp above n_kv_head)
     * the one kv head this rank's query heads read */
    int kv = job_model_kv_heads(spec);
    d->NKV_l = kv >= tp_size ? (int)split_len((size_t)kv, tp_rank, tp_size) : 1;
    d->Ckv_l = d->NKV_l * d->hs;
    d->kv_replicas = kv >= tp_size ? 1 : tp_size / kv;
    d->W_l = d->C_l + 2 * d->Ckv_l;
    if (job_model_mla(spec)) {
        /* multi-head latent attention (--dry-run only: model_unsupported): its
         * up-projected q, k (qk_nope + qk_rope wide a head) and v (v_head_dim)
         * as the attention core reads them, k and v one head per query head */
        const job_mla *a = &spec->mla;
        d->hs = a->v_head_dim;
        d->C_l = d->NH_l * a->v_head_dim;
        d->NKV_l = d->NH_l;
        d->Ckv_l = d->NH_l * (a->qk_nope_head_dim + a->qk_rope_head_dim);
        d->kv_replicas = 1;
        d->W_l = 2 * d->Ckv_l + d->C_l;
    }
    d->seq = model_seq_len(spec);
    if (job_model_is_lm(spec)) {
        d->V_l = (int)split_len((size_t)spec->vocab_size, tp_rank, tp_size);
        d->v0 = (int)split_lo((size_t)spec->vocab_size, tp_rank, tp_size);
    } else {
        d->NP = d->seq - 1;
    }
    d->sp_size = sh->sp && tp_size > 1 ? tp_size : 1;
    d->sp_rank = d->sp_size > 1 ? tp_rank : 0;
    d->cp_size = sh->cp_size > 1 ? sh->cp_size : 1;
    d->cp_rank = d->cp_size > 1 ? sh->cp_rank : 0;
    d->seq /= d->cp_size;
    const job_moe *e = &spec->moe;
    if (e->experts > 0) {
        int glu = spec->kind == MODEL_LLAMA ? 2 : 1;
        d->E = e->experts;
        d->k = e->top_k;
        /* expert tensor parallelism = tp: each expert's hidden columns, and
         * the shared experts' (a dense MLP of shared_experts * d_ff_expert),
         * split over tp like the dense MLP's */
        d->Fe = (int)split_len((size_t)e->d_ff_expert, tp_rank, tp_size);
        d->He = glu * d->Fe;
        d->Fs = (int)split_len((size_t)e->shared_experts * (size_t)e->d_ff_expert, tp_rank, tp_size);
        d->Hs = glu * d->Fs;
        d->ep_size = sh->ep_size > 1 ? sh->ep_size : 1;
        d->El = d->E / d->ep_size;
    }
}

/* Multi-head latent attention's tensors in place of a Llama block's q, k, v
 * and o: [q_a, q_a_norm, q_b] (or q without a query latent), kv_a,
 * kv_a_norm, kv_b, o; how many more than the four they replace. */
static int mla_extra(const job_model *spec)
{
    return job_model_mla(spec) ? (spec->mla.q_lora_rank > 0 ? 7 : 5) - 4 : 0;
}

/* The base model's tensors of a unit (without LoRA's adapters). */
static int base_count(const job_model *spec, int unit)
{
    static const int counts[3][3] = {
        [MODEL_GPT] = {GPT_EMB_COUNT, BLK_COUNT, GPT_HEAD_COUNT},
        [MODEL_VIT] = {VIT_EMB_COUNT, BLK_COUNT, VIT_HEAD_COUNT},
        [MODEL_LLAMA] = {LLAMA_EMB_COUNT, LLAMA_BLK_COUNT, LLAMA_HEAD_COUNT},
    };
    int mla = unit >= 1 && unit <= spec->n_layer ? mla_extra(spec) : 0;
    if (unit >= 1 && unit <= spec->n_layer && job_moe_block(spec, unit - 1)) {
        int shared = spec->moe.shared_experts > 0;
        if (spec->kind == MODEL_LLAMA) return (shared ? MOE_LLAMA_COUNT : MOE_LLAMA_SH_GATE) + mla;
        return shared ? MOE_GPT_COUNT : MOE_GPT_SH_FC;
    }
    if (mla) return LLAMA_BLK_COUNT + mla;
    return counts[spec->kind][unit == 0 ? 0 : unit <= spec->n_layer ? 1 : 2];
}

int model_unit_param_count(const job_model *spec, int unit)
{
    int blk = unit > 0 && unit <= spec->n_layer;
    return base_count(spec, unit) + (blk ? 2 * lora_count(spec) : 0);
}

int model_lora_first(const job_model *spec, int unit) { return base_count(spec, unit); }

/* One tensor's spec without its offset. 1-D tensors have shape [n, 1] so that
 * numel = shape[0] * shape[1] everywhere. */
static void set_spec(param_spec *p, const char *name, int d0, int d1, int ndim, split_kind split,
                     int groups, init_kind init, float std, int tp_rank, int tp_size)
{
    memset(p, 0, sizeof *p);
    p->tp_replicas = 1;
    snprintf(p->name, sizeof p->name, "%s", name);
    p->ndim = ndim;
    p->shape[0] = d0;
    p->shape[1] = d1;
    p->local_shape[0] = d0;
    p->local_shape[1] = d1;
    p->split = split;
    p->split_groups = groups;
    if (split == SPLIT_ROWS)
        p->local_shape[0] = groups * (int)split_len((size_t)(d0 / groups), tp_rank, tp_size);
    else if (split == SPLIT_COLS)
        p->local_shape[1] = (int)split_len((size_t)d1, tp_rank, tp_size);
    p->local_numel = (size_t)p->local_shape[0] * (size_t)p->local_shape[1];
    p->init = init;
    p->init_std = std;
    /* GPT-2 / llm.c: decay the 2-D weights, not biases or layernorm gains. */
    p->decay = ndim == 2;
}

static void embedding_spec(const job_model *s, int i, int r, int tp, param_spec *p)
{
    int C = s->d_model;
    if (s->kind == MODEL_GPT) {
        if (i == GPT_EMB_WTE)
            set_spec(p, "wte", s->vocab_size, C, 2, SPLIT_ROWS, 1, INIT_NORMAL, 0.02f, r, tp);
        else
            set_spec(p, "wpe", s->seq_len, C, 2, SPLIT_NONE, 1, INIT_NORMAL, 0.01f, r, tp);
        return;
    }
    int seq = model_seq_len(s), kin = s->channels * s->patch_size * s->patch_size;
    switch (i) {
    case VIT_EMB_PATCH_W: set_spec(p, "patch.w", C, kin, 2, SPLIT_NONE, 1, INIT_NORMAL, 0.02f, r, tp); break;
    case VIT_EMB_PATCH_B: set_spec(p, "patch.b", C, 1, 1, SPLIT_NONE, 1, INIT_ZEROS, 0, r, tp); break;
    case VIT_EMB_CLS: set_spec(p, "cls", C, 1, 1, SPLIT_NONE, 1, INIT_NORMAL, 0.02f, r, tp); break;
    default:
        set_spec(p, "pos", seq, C, 2, SPLIT_NONE, 1, INIT_NORMAL, 0.02f, r, tp);
        /* timm and the ViT paper keep position embeddings out of weight decay */
        p->decay = 0;
        break;
    }
}

static void block_spec(const job_model *s, int layer, int i, int r, int tp, param_spec *p)
{
    static const char *const names[BLK_COUNT] = {
        "ln1.w", "ln1.b", "attn.qkv.w", "attn.qkv.b", "attn.proj.w", "attn.proj.b",
        "ln2.w", "ln2.b", "mlp.fc.w", "mlp.fc.b", "mlp.proj.w", "mlp.proj.b"};
    char name[PARAM_NAME_MAX];
    snprintf(name, sizeof name, "h.%d.%s", layer, names[i]);
    int C = s->d_model, F = s->d_ff;
    /* GPT-2: residual projections scaled by 1/sqrt(2L) so the stream's variance
     * does not grow with depth */
    float proj_std = 0.02f / sqrtf(2.0f * (float)s->n_layer);
    switch (i) {
    case BLK_LN1_W: case BLK_LN2_W:
        set_spec(p, name, C, 1, 1, SPLIT_NONE, 1, INIT_ONES, 0, r, tp); break;
    case BLK_LN1_B: case BLK_LN2_B: case BLK_PROJ_B: case BLK_MPROJ_B:
        set_spec(p, name, C, 1, 1, SPLIT_NONE, 1, INIT_ZEROS, 0, r, tp); break;
    case BLK_QKV_W: set_spec(p, name, 3 * C, C, 2, SPLIT_ROWS, 3, INIT_NORMAL, 0.02f, r, tp); break;
    case BLK_QKV_B: set_spec(p, name, 3 * C, 1, 1, SPLIT_ROWS, 3, INIT_ZEROS, 0, r, tp); break;
    case BLK_PROJ_W: set_spec(p, name, C, C, 2, SPLIT_COLS, 1, INIT_NORMAL, proj_std, r, tp); break;
    case BLK_FC_W: set_spec(p, name, F, C, 2, SPLIT_ROWS, 1, INIT_NORMAL, 0.02f, r, tp); break;
    case BLK_FC_B: set_spec(p, name, F, 1, 1, SPLIT_ROWS, 1, INIT_ZEROS, 0, r, tp); break;
    default: set_spec(p, name, C, F, 2, SPLIT_COLS, 1, INIT_NORMAL, proj_std, r, tp); break;
    }
}

static void head_spec(const job_model *s, int i, int r, int tp, param_spec *p)
{
    int C = s->d_model;
    if (i == 0) { set_spec(p, "lnf.w", C, 1, 1, SPLIT_NONE, 1, INIT_ONES, 0, r, tp); return; }
    if (i == 1) { set_spec(p, "lnf.b", C, 1, 1, SPLIT_NONE, 1, INIT_ZEROS, 0, r, tp); return; }
    if (s->kind == MODEL_GPT) {
        /* the LM head is wte itself: same name, split, init, hence same values */
        embedding_spec(s, GPT_EMB_WTE, r, tp, p);
        p->tied = 1;
        return;
    }
    if (i == VIT_HEAD_W)
        set_spec(p, "head.w", s->n_classes, C, 2, SPLIT_NONE, 1, INIT_NORMAL, 0.02f, r, tp);
    else
        set_spec(p, "head.b", s->n_classes, 1, 1, SPLIT_NONE, 1, INIT_ZEROS, 0, r, tp);
}

/* Llama (Hugging Face's LlamaForCausalLM, torchtitan's llama3): RMSNorm
 * gains, four attention matrices (k and v of n_kv_head heads), SwiGLU's
 * gate, up and down, no biases. q, k and v are three tensors one after the
 * other in the unit's buffer, each split by heads, so a rank's local rows of
 * them are one [C_l + 2 Ckv_l, C] matrix, the packed qkv the attention
 * reads (ops.h attention_forward), computed in one GEMM; gate and up
 * likewise make SwiGLU's packed [2 F_l, C] (ops.h swiglu_forward). With tp
 * above n_kv_head, k and v give each rank the kv head its query heads read
 * (tp_replicas ranks hold it). Init: GPT-2's (normal 0.02, the residual
 * projections o and down scaled by 1 / sqrt(2L)), gains 1. */
static void llama_block_spec(const job_model *s, int layer, int i, int r, int tp, param_spec *p)
{
    static const char *const names[LLAMA_BLK_COUNT] = {
        "attn_norm.w", "attn.q.w", "attn.k.w", "attn.v.w", "attn.o.w",
        "mlp_norm.w", "mlp.gate.w", "mlp.up.w", "mlp.down.w"};
    char name[PARAM_NAME_MAX];
    snprintf(name, sizeof name, "h.%d.%s", layer, names[i]);
    int C = s->d_model, F = s->d_ff, kv = job_model_kv_heads(s), Ckv = kv * (C / s->n_head);
    float proj_std = 0.02f / sqrtf(2.0f * (float)s->n_layer);
    switch (i) {
    case LLAMA_ATTN_NORM: case LLAMA_MLP_NORM:
        set_spec(p, name, C, 1, 1, SPLIT_NONE, 1, INIT_ONES, 0, r, tp); break;
    case LLAMA_Q: set_spec(p, name, C, C, 2, SPLIT_ROWS, 1, INIT_NORMAL, 0.02f, r, tp); break;
    case LLAMA_K: case LLAMA_V:
        if (tp <= kv) {
            set_spec(p, name, Ckv, C, 2, SPLIT_ROWS, 1, INIT_NORMAL, 0.02f, r, tp);
        } else { /* replicated: this rank's part r / rep of kv parts */
            int rep = tp / kv;
            set_spec(p, name, Ckv, C, 2, SPLIT_ROWS, 1, INIT_NORMAL, 0.02f, r / rep, kv);
            p->tp_replicas = rep;
        }
        break;
    case LLAMA_O: set_spec(p, name, C, C, 2, SPLIT_COLS, 1, INIT_NORMAL, proj_std, r, tp); break;
    case LLAMA_GATE: case LLAMA_UP: set_spec(p, name, F, C, 2, SPLIT_ROWS, 1, INIT_NORMAL, 0.02f, r, tp); break;
    default: set_spec(p, name, C, F, 2, SPLIT_COLS, 1, INIT_NORMAL, proj_std, r, tp); break;
    }
}

/* An MoE block's tensors past its second norm (model_internal.h MOE_*):
 * the router [E, C]; the routed experts stacked by rows, expert e's matrix
 * its block of rows (so expert parallelism can split them like tp splits
 * rows): a GPT's fc [E Fe, C] and proj [E C, Fe], a Llama's gate_up [E 2Fe,
 * C] (expert e's gate rows, then its up rows: SwiGLU's packed layout, one
 * GEMM per expert) and down [E C, Fe]; the shared experts' MLP of Fs =
 * shared_experts Fe, a dense MLP's tensors (GPT fc, proj; Llama gate, up,
 * down). Under tp (expert tensor parallelism = tp, Megatron-Core's) each
 * expert splits as a dense MLP: fc / gate_up by rows, each expert's (a
 * Llama's gate and up each) apart, proj / down by columns; the shared
 * experts likewise; the router is replicated. Under expert parallelism
 * (ep_size > 1) a rank's routed experts' tensors are its block of E /
 * ep_size experts' rows (param_spec ep_rank), tp-split within it. Init: normal 0.02, the
 * output projections GPT-2's 0.02 / sqrt(2L), as the dense block's. `i`
 * counts from the router (0). */
static void moe_spec(const job_model *s, int layer, int i, int r, int tp, int ep_rank, int ep_size, param_spec *p)
{
    static const char *const gpt[] = {"moe.router.w", "moe.experts.fc.w", "moe.experts.proj.w", "moe.shared.fc.w",
                                      "moe.shared.proj.w"};
    static const char *const llama[] = {"moe.router.w",    "moe.experts.gate_up.w", "moe.experts.down.w",
                                        "moe.shared.gate.w", "moe.shared.up.w",     "moe.shared.down.w"};
    int is_llama = s->kind == MODEL_LLAMA;
    char name[PARAM_NAME_MAX];
    snprintf(name, sizeof name, "h.%d.%s", layer, is_llama ? llama[i] : gpt[i]);
    int C = s->d_model, E = s->moe.experts, Fe = s->moe.d_ff_expert, Fs = s->moe.shared_experts * Fe;
    int glu = is_llama ? 2 : 1;
    float proj_std = 0.02f / sqrtf(2.0f * (float)s->n_layer);
    /* a GPT's i 3, 4 are the shared fc, proj; a Llama's 3, 4, 5 gate, up, down */
    int out = is_llama ? i == 2 || i == 5 : i == 2 || i == 4;
    int rows = i == 0 ? E : i == 1 ? E * glu * Fe : i == 2 ? E * C : out ? C : Fs;
    int cols = out ? (i == 2 ? Fe : Fs) : C;
    /* the router replicated; the experts' first matrices column-parallel
     * (each expert's rows, a Llama's gate and up each, split apart: E or
     * 2 E row groups), their second row-parallel (columns) */
    split_kind split = i == 0 ? SPLIT_NONE : out ? SPLIT_COLS : SPLIT_ROWS;
    int groups = i == 1 ? E * glu : 1;
    set_spec(p, name, rows, cols, 2, split, groups, INIT_NORMAL, out ? proj_std : 0.02f, r, tp);
    if ((i == 1 || i == 2) && ep_size > 1) {
        p->ep_rank = ep_rank;
        p->ep_size = ep_size;
        p->local_shape[0] /= ep_size;
        p->local_numel = (size_t)p->local_shape[0] * (size_t)p->local_shape[1];
    }
}

/* Multi-head latent attention (DeepSeek-V2/V3, Hugging Face's names): the
 * query's down projection [q_lora, C] and its RMSNorm, its up projection
 * [H (nope + rope), q_lora] (or one [H (nope + rope), C] without a query
 * latent); the keys' and values' shared down projection [kv_lora + rope, C]
 * (the latent and the rotary key) and its RMSNorm, their up projection [H
 * (nope + v), kv_lora]; the output [C, H v]. The up projections split by
 * heads over tp, the output by its input columns, the down projections and
 * norms replicated (Megatron-Core's MLA). `i` counts from the first (0). */
static void mla_spec(const job_model *s, int layer, int i, int r, int tp, param_spec *p)
{
    const job_mla *a = &s->mla;
    int C = s->d_model, H = s->n_head, qk = a->qk_nope_head_dim + a->qk_rope_head_dim;
    float proj_std = 0.02f / sqrtf(2.0f * (float)s->n_layer);
    if (a->q_lora_rank == 0) i += 2; /* no query latent: q in q_b's place */
    char name[PARAM_NAME_MAX];
    static const char *const names[] = {"attn.q_a.w", "attn.q_a_norm.w", "attn.q_b.w", "attn.kv_a.w",
                                        "attn.kv_a_norm.w", "attn.kv_b.w", "attn.o.w"};
    snprintf(name, sizeof name, "h.%d.%s", layer, i == 2 && a->q_lora_rank == 0 ? "attn.q.w" : names[i]);
    switch (i) {
    case 0: set_spec(p, name, a->q_lora_rank, C, 2, SPLIT_NONE, 1, INIT_NORMAL, 0.02f, r, tp); break;
    case 1: set_spec(p, name, a->q_lora_rank, 1, 1, SPLIT_NONE, 1, INIT_ONES, 0, r, tp); break;
    case 2: set_spec(p, name, H * qk, a->q_lora_rank ? a->q_lora_rank : C, 2, SPLIT_ROWS, 1, INIT_NORMAL, 0.02f, r, tp);
        break;
    case 3: set_spec(p, name, a->kv_lora_rank + a->qk_rope_head_dim, C, 2, SPLIT_NONE, 1, INIT_NORMAL, 0.02f, r, tp);
        break;
    case 4: set_spec(p, name, a->kv_lora_rank, 1, 1, SPLIT_NONE, 1, INIT_ONES, 0, r, tp); break;
    case 5: set_spec(p, name, H * (a->qk_nope_head_dim + a->v_head_dim), a->kv_lora_rank, 2, SPLIT_ROWS, 1, INIT_NORMAL,
                     0.02f, r, tp);
        break;
    default: set_spec(p, name, C, H * a->v_head_dim, 2, SPLIT_COLS, 1, INIT_NORMAL, proj_std, r, tp); break;
    }
}

/* Unit 0: the token embedding alone (positions are rotary). Head: the final
 * RMSNorm and the LM head, wte itself when tie_embeddings (the GPT's tied
 * copy), else its own vocabulary-split matrix. */
static void llama_edge_spec(const job_model *s, int unit, int i, int r, int tp, param_spec *p)
{
    int C = s->d_model;
    if (unit == 0 || i == LLAMA_HEAD_W) {
        int tied = unit != 0 && job_model_tied_head(s);
        set_spec(p, unit == 0 || tied ? "wte" : "lm_head.w", s->vocab_size, C, 2, SPLIT_ROWS, 1, INIT_NORMAL, 0.02f,
                 r, tp);
        p->tied = tied;
        return;
    }
    set_spec(p, "norm.w", C, 1, 1, SPLIT_NONE, 1, INIT_ONES, 0, r, tp);
}

/* A block's LoRA adapter (lora.h): the k-th target's A [rank, in] (PEFT's
 * Kaiming-uniform, bound 1 / sqrt(in)) when `b` is 0, its B [out, rank]
 * (zeros: the adapted model starts as the base) when 1; split as the base
 * layer: a column-parallel one's B by rows, a row-parallel one's A by
 * columns. Names "h.L.lora.TARGET.a" / ".b". */
static void lora_spec(const job_model *s, int layer, int k, int b, int r, int tp, param_spec *p)
{
    int target = lora_target(s, k), in, out, row, R = s->lora.rank;
    lora_geometry(s, target, &in, &out, &row);
    char name[PARAM_NAME_MAX];
    snprintf(name, sizeof name, "h.%d.lora.%s.%s", layer, job_lora_target_name(target), b ? "b" : "a");
    if (!b) set_spec(p, name, R, in, 2, row ? SPLIT_COLS : SPLIT_NONE, 1, INIT_UNIFORM, 1.0f / sqrtf((float)in), r, tp);
    else set_spec(p, name, out, R, 2, row ? SPLIT_NONE : SPLIT_ROWS, 1, INIT_ZEROS, 0, r, tp);
    p->lora = 1;
}

static void spec_no_offset(const job_model *s, int unit, int i, int r, int tp, int ep_rank, int ep_size,
                           param_spec *p)
{
    int nb = base_count(s, unit);
    if (i >= nb) { /* LoRA's adapters, after the block's base tensors */
        lora_spec(s, unit - 1, (i - nb) / 2, (i - nb) % 2, r, tp, p);
        p->unit = unit;
        return;
    }
    int router = s->kind == MODEL_LLAMA ? MOE_LLAMA_ROUTER : MOE_GPT_ROUTER;
    int mla = unit >= 1 && unit <= s->n_layer ? mla_extra(s) : 0;
    if (mla && i >= LLAMA_Q && i < LLAMA_MLP_NORM + mla) { /* q, k, v, o's places and the extra ones */
        mla_spec(s, unit - 1, i - LLAMA_Q, r, tp, p);
        p->unit = unit;
        p->frozen = job_lora_on(s);
        return;
    }
    if (mla && i >= LLAMA_MLP_NORM + mla) i -= mla; /* the rest as a Llama block's */
    if (unit >= 1 && unit <= s->n_layer && i >= router && job_moe_block(s, unit - 1)) {
        moe_spec(s, unit - 1, i - router, r, tp, ep_rank, ep_size, p);
    } else if (s->kind == MODEL_LLAMA) {
        if (unit == 0 || unit > s->n_layer) llama_edge_spec(s, unit, i, r, tp, p);
        else llama_block_spec(s, unit - 1, i, r, tp, p);
    } else if (unit == 0) {
        embedding_spec(s, i, r, tp, p);
    } else if (unit <= s->n_layer) {
        block_spec(s, unit - 1, i, r, tp, p);
    } else {
        head_spec(s, i, r, tp, p);
    }
    p->unit = unit;
    /* under LoRA the whole base model is frozen */
    p->frozen = job_lora_on(s);
}

void model_unit_param_spec_ep(const job_model *spec, int unit, int i, int tp_rank, int tp_size, int ep_rank,
                              int ep_size, param_spec *out)
{
    /* offsets: the tensors are packed in order, the trainable ones in the
     * unit's buffer and the frozen ones in its frozen buffer, so sum the ones
     * before i that live in the same */
    spec_no_offset(spec, unit, i, tp_rank, tp_size, ep_rank, ep_size, out);
    size_t off = 0;
    for (int j = 0; j < i; j++) {
        param_spec q;
        spec_no_offset(spec, unit, j, tp_rank, tp_size, ep_rank, ep_size, &q);
        if (q.frozen == out->frozen) off += q.local_numel;
    }
    out->offset = off;
}

void model_unit_param_spec(const job_model *spec, int unit, int i, int tp_rank, int tp_size,
                           param_spec *out)
{
    model_unit_param_spec_ep(spec, unit, i, tp_rank, tp_size, 0, 1, out);
}

/* Elements of a unit's trainable (frozen 0) or frozen (1) tensors. */
static size_t unit_numel_of(const job_model *spec, int unit, int tp_rank, int tp_size, int ep_size, int frozen)
{
    size_t n = 0;
    int np = model_unit_param_count(spec, unit);
    for (int i = 0; i < np; i++) {
        param_spec p;
        spec_no_offset(spec, unit, i, tp_rank, tp_size, 0, ep_size, &p);
        if (p.frozen == frozen) n += p.local_numel;
    }
    return n;
}

size_t model_unit_numel_ep(const job_model *spec, int unit, int tp_rank, int tp_size, int ep_size)
{
    return unit_numel_of(spec, unit, tp_rank, tp_size, ep_size, 0);
}

size_t model_unit_numel(const job_model *spec, int unit, int tp_rank, int tp_size)
{
    return unit_numel_of(spec, unit, tp_rank, tp_size, 1, 0);
}

size_t model_unit_frozen_numel(const job_model *spec, int unit, int tp_rank, int tp_size)
{
    return unit_numel_of(spec, unit, tp_rank, tp_size, 1, 1);
}

size_t model_unit_expert_numel(const job_model *spec, int unit, int tp_rank, int tp_size)
{
    if (unit < 1 || unit > spec->n_layer || !job_moe_block(spec, unit - 1)) return 0;
    int router = (spec->kind == MODEL_LLAMA ? MOE_LLAMA_ROUTER : MOE_GPT_ROUTER) + mla_extra(spec);
    size_t n = 0;
    for (int i = router + 1; i <= router + 2; i++) { /* the routed experts' two stacked tensors */
        param_spec p;
        spec_no_offset(spec, unit, i, tp_rank, tp_size, 0, 1, &p);
        n += p.local_numel;
    }
    return n;
}

size_t param_global_index(const param_spec *p, int tp_rank, int tp_size, size_t i)
{
    size_t K = (size_t)p->shape[1];
    /* an ep rank's experts: its block of E / ep experts' rows, split over tp
     * within the block as the whole tensor is */
    if (param_is_expert(p)) {
        param_spec q = *p;
        q.ep_rank = 0, q.ep_size = 1;
        q.shape[0] = p->shape[0] / p->ep_size;
        if (q.split == SPLIT_ROWS) q.split_groups = p->split_groups / p->ep_size;
        return (size_t)p->ep_rank * (size_t)q.shape[0] * K + param_global_index(&q, tp_rank, tp_size, i);
    }
    if (p->split == SPLIT_NONE) return i;
    if (p->split == SPLIT_COLS) {
        size_t lc = (size_t)p->local_shape[1];
        size_t row = i / lc, col = i % lc;
        return row * K + split_lo(K, tp_rank, tp_size) + col;
    }
    /* SPLIT_ROWS: the local rows are the groups' local slices one after the other */
    int part, parts;
    param_tp_part(p, tp_rank, tp_size, &part, &parts);
    size_t rows_g = (size_t)p->shape[0] / (size_t)p->split_groups;
    size_t lrows_g = (size_t)p->local_shape[0] / (size_t)p->split_groups;
    size_t lrow = i / K, col = i % K;
    size_t g = lrow / lrows_g, r = lrow % lrows_g;
    size_t grow = g * rows_g + split_lo(rows_g, part, parts) + r;
    return grow * K + col;
}

/* The matmul weights one token passes through in a block, and of them the
 * ones block recompute re-runs (all but the MLP's output projection).
 * GPT/ViT: qkv 3C^2, proj C^2, fc C F, mproj F C. Llama: q C^2, k and v
 * C Ckv each (Ckv = n_kv_head * head size: GQA's smaller k and v), o C^2,
 * SwiGLU's gate, up and down C F each. An MoE block (layer, 0-based): the
 * router E C, then the weights a token's top_k experts and the shared
 * experts hold (the active ones: each token passes through k of the E), the
 * MLP's in place of the dense one's; recompute re-runs the routed experts'
 * output projection too (their output is what the router's gradient reads),
 * not the shared one's. */
static double block_weights(const job_model *s, int layer, int recomputed)
{
    double C = s->d_model, F = s->d_ff;
    int llama = s->kind == MODEL_LLAMA;
    double glu = llama ? 2.0 : 1.0;
    double attn = 4.0 * C * C;
    if (llama) attn = 2.0 * C * C + 2.0 * C * (double)job_model_kv_heads(s) * (C / s->n_head);
    if (job_model_mla(s)) {
        double in, out;
        model_mla_weights(s, &in, &out);
        attn = in + out;
    }
    if (job_moe_block(s, layer)) {
        const job_moe *e = &s->moe;
        double Fe = e->d_ff_expert, Fs = (double)e->shared_experts * Fe, k = e->top_k;
        return attn + (double)e->experts * C + k * (glu + 1.0) * C * Fe + (glu + (recomputed ? 0.0 : 1.0)) * C * Fs;
    }
    return attn + (glu + (recomputed ? 0.0 : 1.0)) * C * F;
}

/* FLOPs of one sample, fwd + bwd, whole model (tp/pp do not change the total;
 * train.lora below):
 *   6 * sum over matmuls (weight elements * rows that pass through it per sample)
 *   + attention 12 * L * seq^2 * C   (QK^T and AV: 2 * 2*seq^2*C forward, x3 with backward;
 *                                     the causal mask's savings are not counted, as in PaLM's MFU;
 *                                     GQA shares k and v, not the products: still n_head heads)
 * GPT, Llama: every matmul sees seq = T rows: the blocks (block_weights) and the LM
 *      head V*C (tied or not: one GEMM). The embedding lookup is not a matmul; nor
 *      are the norms, RoPE and SwiGLU's product (elementwise, not counted, as
 *      Megatron and the Llama 3 paper leave them out).
 * ViT: blocks see NP+1 rows, the patch projection NP rows (C*ch*P^2), the classifier 1 row.
 * Recompute re-runs each block's forward up to its MLP projection (its output is not needed):
 *   + 2 * seq * L * block_weights(recomputed) + 4 * L * seq^2 * C.
 * Selective recompute re-runs only each block's attention core (QK^T and AV):
 *   + 4 * L * seq^2 * C, with naive attention; fused attention keeps no
 *   probabilities, so selective re-runs nothing (the blockwise backward's own
 *   recomputation of QK^T is part of the attention it runs, not counted, as
 *   neither PaLM's MFU nor Megatron's count it). */
void model_mla_weights(const job_model *spec, double *in, double *out)
{
    const job_mla *a = &spec->mla;
    double C = spec->d_model, H = spec->n_head, ql = a->q_lora_rank, kvl = a->kv_lora_rank;
    double qk = a->qk_nope_head_dim + a->qk_rope_head_dim;
    double q = ql > 0 ? C * ql + ql * H * qk : C * H * qk;
    *in = q + C * (kvl + a->qk_rope_head_dim) + kvl * H * (a->qk_nope_head_dim + a->v_head_dim);
    *out = H * a->v_head_dim * C;
}

double model_attention_width(const job_model *spec)
{
    if (!job_model_mla(spec)) return spec->d_model;
    const job_mla *a = &spec->mla;
    return spec->n_head * (a->qk_nope_head_dim + a->qk_rope_head_dim + a->v_head_dim) / 2.0;
}

const char *model_unsupported(const job_model *spec)
{
    if (job_model_mla(spec)) return "attention mla: counted by --dry-run, not trained yet";
    return NULL;
}

double model_unit_flops(const job_model *spec, int unit, recompute_kind recompute)
{
    double C = spec->d_model, seq = model_seq_len(spec), Cw = model_attention_width(spec);
    if (unit == 0) {
        if (job_model_is_lm(spec)) return 0.0; /* a lookup, not a matmul */
        double kin = (double)spec->channels * spec->patch_size * spec->patch_size;
        return 6.0 * C * kin * (seq - 1);
    }
    /* train.lora: a frozen weight's backward is its input gradient alone, 4
     * instead of 6 (no weight gradient); the adapters add theirs (lora.h) */
    int lora = job_lora_on(spec);
    double per_weight = lora ? 4.0 : 6.0;
    if (unit > spec->n_layer)
        return job_model_is_lm(spec) ? per_weight * spec->vocab_size * C * seq : 6.0 * spec->n_classes * C;
    double f = per_weight * block_weights(spec, unit - 1, 0) * seq + 12.0 * seq * seq * Cw, af, aa, ar;
    lora_block_flops(spec, 1, seq, &af, &aa, &ar);
    f += 3.0 * af + aa;
    if (recompute == RECOMPUTE_BLOCK) f += 2.0 * seq * block_weights(spec, unit - 1, 1) + 4.0 * seq * seq * Cw + ar;
    else if (recompute == RECOMPUTE_SELECTIVE && !model_attention_lse(spec, 1)) f += 4.0 * seq * seq * Cw;
    return f;
}

double model_flops_per_sample(const job_model *spec, recompute_kind recompute)
{
    int L = spec->n_layer;
    double f = model_unit_flops(spec, 0, recompute) + model_unit_flops(spec, L + 1, recompute);
    if (spec->moe.experts < 1) return f + L * model_unit_flops(spec, 1, recompute);
    for (int u = 1; u <= L; u++) f += model_unit_flops(spec, u, recompute); /* dense and MoE blocks differ */
    return f;
}

double model_exec_flops_per_sample(const job_model *spec, recompute_kind recompute)
{
    double f = model_flops_per_sample(spec, recompute);
    if (job_model_is_lm(spec)) f += 2.0 * spec->vocab_size * (double)spec->d_model * model_seq_len(spec);
    return f;
}
