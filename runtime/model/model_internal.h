/* model_internal.h — what the files of runtime/model share: the model object,
 * the per-rank dimensions, the activation buffers. Nothing outside
 * runtime/model includes it; the rest of dtrun sees only model.h. */
#ifndef DTRUN_MODEL_INTERNAL_H
#define DTRUN_MODEL_INTERNAL_H

#include "runtime/model/model.h"
#include "runtime/model/lora.h"

/* Order of the parameter tensors inside each kind of unit (and so inside its
 * flat buffer). Checkpoints go by name, but these indices are how the model's
 * own code finds a tensor. */
enum { GPT_EMB_WTE, GPT_EMB_WPE, GPT_EMB_COUNT };
enum { VIT_EMB_PATCH_W, VIT_EMB_PATCH_B, VIT_EMB_CLS, VIT_EMB_POS, VIT_EMB_COUNT };
enum {
    BLK_LN1_W, BLK_LN1_B, BLK_QKV_W, BLK_QKV_B, BLK_PROJ_W, BLK_PROJ_B,
    BLK_LN2_W, BLK_LN2_B, BLK_FC_W, BLK_FC_B, BLK_MPROJ_W, BLK_MPROJ_B, BLK_COUNT
};
enum { GPT_HEAD_LNF_W, GPT_HEAD_LNF_B, GPT_HEAD_WTE, GPT_HEAD_COUNT };
enum { VIT_HEAD_LNF_W, VIT_HEAD_LNF_B, VIT_HEAD_W, VIT_HEAD_B, VIT_HEAD_COUNT };
/* Llama (params.c): q, k, v and gate, up are adjacent, so each trio / pair
 * is one packed matrix in the buffer. */
enum { LLAMA_EMB_WTE, LLAMA_EMB_COUNT };
enum {
    LLAMA_ATTN_NORM, LLAMA_Q, LLAMA_K, LLAMA_V, LLAMA_O, LLAMA_MLP_NORM, LLAMA_GATE, LLAMA_UP, LLAMA_DOWN,
    LLAMA_BLK_COUNT
};
enum { LLAMA_HEAD_NORM, LLAMA_HEAD_W, LLAMA_HEAD_COUNT };
/* An MoE block (model.moe, job_moe_block): the dense block's tensors up to and
 * including its second norm, then the router, the routed experts' two (GPT:
 * fc, proj) or Llama's packed gate|up and down, and (shared_experts > 0) the
 * shared experts' MLP, a GPT's fc and proj or a Llama's gate, up (adjacent:
 * packed like the dense block's) and down. No biases past the norms. */
enum { MOE_GPT_ROUTER = BLK_LN2_B + 1, MOE_GPT_EXP_FC, MOE_GPT_EXP_PROJ, MOE_GPT_SH_FC, MOE_GPT_SH_PROJ,
       MOE_GPT_COUNT };
enum { MOE_LLAMA_ROUTER = LLAMA_MLP_NORM + 1, MOE_LLAMA_EXP_GATE_UP, MOE_LLAMA_EXP_DOWN, MOE_LLAMA_SH_GATE,
       MOE_LLAMA_SH_UP, MOE_LLAMA_SH_DOWN, MOE_LLAMA_COUNT };
#define UNIT_MAX_PARAMS MOE_GPT_COUNT
_Static_assert((int)MOE_GPT_COUNT >= (int)BLK_COUNT && (int)MOE_GPT_COUNT >= (int)MOE_LLAMA_COUNT, "UNIT_MAX_PARAMS bounds every unit");

/* Sizes on one tp rank. Splits use floor(n*r/tp): even when tp divides n (heads,
 * d_ff), and still defined when it does not (a vocab of 50257). */
typedef struct {
    int C;          /* d_model (residual stream, replicated) */
    int NH_l;       /* local heads */
    int hs;         /* head size: d_model / n_head */
    int C_l;        /* local attention width: NH_l * head size */
    int NKV_l;      /* local key/value heads (GQA; NH_l for GPT and ViT) */
    int Ckv_l;      /* their width: NKV_l * hs */
    int kv_replicas; /* tp ranks holding the same kv heads (tp above n_kv_head), else 1 */
    int W_l;        /* a row of the packed qkv: C_l + 2 Ckv_l (3 C_l without GQA) */
    int F_l;        /* local d_ff columns */
    int H_l;        /* the MLP's first GEMM's output columns: F_l (fc), or 2 F_l (Llama:
                       SwiGLU's gate and up, packed) */
    int V_l, v0;    /* GPT: local vocab rows [v0, v0 + V_l) */
    int seq;        /* T or NP + 1 */
    int NP;         /* ViT patches */
    int sp_size;    /* the residual stream's rows are split in this many parts: tp with
                       sequence parallelism, else 1 */
    int sp_rank;    /* which part this rank holds (its tp rank, or 0) */
    int cp_size;    /* context parallelism: seq is the local sequence, 1 / cp_size of the
                       sample's, two chunks of seq / 2 (model_cp_chunk); else 1 */
    int cp_rank;
    /* model.moe (0 without): experts E, choices per token k, an expert's hidden
     * width Fe on this tp rank and its first GEMM's output He (Fe, or 2 Fe for
     * a Llama's packed gate|up), the shared experts' Fs (this tp rank's of
     * shared_experts * d_ff_expert) and Hs likewise: split over tp as d_ff
     * (expert tensor parallelism = tp). Expert
     * parallelism (model_shard ep_size): this rank computes El = E / ep_size
     * of the experts, on the rows every rank of its ep group sends them */
    int E, k, Fe, He, Fs, Hs;
    int El, ep_size;
} model_dims;

/* Memory an MoE block sizes by the rows that arrive at its experts (moe.c:
 * allocated once the dispatcher's counts are known, ops->alloc_ordered). */
typedef struct {
    void *mem;
    size_t bytes;
} moe_held;

/* Where the pieces of an activation allocation start: a cache line; also
 * keeps SIMD loads aligned (acts.c's layouts, moe.c's expert rows). */
#define ACTS_ALIGN 64
static inline size_t acts_align(size_t bytes) { return (bytes + ACTS_ALIGN - 1) / ACTS_ALIGN * ACTS_ALIGN; }

/* Context parallelism: where local row i of cp rank r's [B, seq] batch (its
 * tokens) sits in the batch of whole samples [B, seq * cp_size]. */
static inline size_t cp_row_of_rank(const model_dims *d, int r, size_t i)
{
    if (d->cp_size == 1) return i;
    size_t T = (size_t)d->seq, Tc = T / 2, b = i / T, t = i % T;
    int half = t >= Tc;
    return b * T * (size_t)d->cp_size + (size_t)model_cp_chunk(r, d->cp_size, half) * Tc + t % Tc;
}
/* The same for this rank's rows. */
static inline size_t cp_global_row(const model_dims *d, size_t i) { return cp_row_of_rank(d, d->cp_rank, i); }

/* Rows of the [B*seq, C] residual stream this rank holds, and where they start
 * in the whole: all of them, or with sequence parallelism its 1/tp. */
static inline int rows_local(const model_dims *d, int B) { return B * d->seq / d->sp_size; }
static inline size_t rows_first(const model_dims *d, int B)
{
    return (size_t)rows_local(d, B) * (size_t)d->sp_rank;
}

/* Index of a block unit's first LoRA adapter tensor (its base tensors'
 * count: LoRA's come after them, A then B per target, lora.h). */
int model_lora_first(const job_model *spec, int unit);

/* Rows [lo, hi) of n that tp rank r holds. */
size_t split_lo(size_t n, int r, int tp);
size_t split_len(size_t n, int r, int tp);

void model_dims_of(const job_model *spec, const model_shard *sh, model_dims *d);

/* The fp32 working copies under mixed precision: the widened parameters of
 * the unit being computed and (bf16 gradients) its micro-batch gradient. One
 * model object owns them, or the chunks of a pipeline rank share one (they
 * compute one unit at a time): p_of / g_of say whose unit the buffers hold,
 * so a unit read outside its own computation is still caught. */
typedef struct model_mixed_work {
    float *wparam;                   /* widened parameters of p_of's unit w_unit (its trainable
                                        tensors, then its frozen ones) */
    float *wgrad;                    /* bf16 gradients only: g_of's unit wg_unit's micro-batch gradient */
    const struct model *p_of, *g_of; /* NULL: none */
    int w_unit, wg_unit;
    size_t numel, gnumel;            /* floats of wparam, of wgrad */
    int refs;
} model_mixed_work;

struct model {
    job_model spec;
    model_shard shard;
    const dt_ops *ops;
    recompute_kind recompute;
    model_precision prec;
    dt_dtype act;          /* the activations' type (ops.h): bf16 under mixed precision */
    model_hooks hooks;
    model_layers layers;   /* the tp layers, or the plain local ones (local_layers.c) */
    model_layers local;    /* the plain local ones always: the MoE layer computes its tp
                              shards through them and sums them with layers.partial_sum */
    model_attention attn;  /* the cp ring, or the local attention (local_layers.c) */
    int attn_set;
    int layers_set;        /* a strategy gave them (model_set_layers) */
    /* train.lora's dropout this forward or backward (model_batch.step, 0: none,
     * in evaluation) and the seed its draws come from (model_init_params') */
    long lora_step;
    unsigned long long seed;
    model_dims d;
    int n_held;            /* unit_end - unit_begin */
    int n_blocks;          /* block units held */
    int first_block;       /* unit of the first block held (valid when n_blocks > 0) */
    int has_emb, has_head;
    void **params;         /* current binding, per held unit (index unit - unit_begin) */
    void **grads;
    void **own_params;     /* what model_create allocated (freed by destroy) */
    void **own_grads;
    /* train.lora: each held unit's frozen tensors (the base model), params only */
    void **frozen;         /* current binding */
    void **own_frozen;
    size_t *frozen_numel;
    /* mixed precision (model.h): the fp32 working copies, shared by the chunks
     * of a pipeline rank (model_share_mixed_work) */
    struct model_mixed_work *mw; /* NULL in fp32 */
    size_t work_numel;     /* this model's need of wparam: the largest unit, its frozen tensors too */
    size_t work_gnumel;    /* of wgrad: the largest unit's trainable tensors */
    void *work_mem;        /* the activations' working set, shared by every model_acts:
                              the model's own part (acts.c layout_work) */
    size_t work_bytes;
    struct model_scratch *scr; /* and its scratch part, maybe shared with other
                                  models (model_share_scratch) */
    int work_B;            /* it serves micro-batches of up to this many samples */
    struct model_acts *acts_list;
    size_t *unit_numel;
    param_spec *specs;     /* every tensor of the held units, in unit order */
    int n_specs;
    int *unit_first_spec;  /* index into specs of each held unit's first tensor */
    /* model.moe (moe_state.c): per held MoE block (moe_slot[k] of the k-th block
     * held, -1 when dense) DeepSeek-V3's routing bias (device, [E] each,
     * starting at 0), what the training forwards routed since the last
     * model_moe_stats_reset, and the dispatcher (local_layers.c's, or a
     * strategy's) */
    int n_moe;
    int *moe_slot;
    float *moe_bias;         /* [n_moe, E] device */
    model_moe_stats *moe_stats; /* [n_moe] host, each with its [E] of chosen */
    double *moe_chosen_mem;
    model_moe_dispatcher moe_disp;
    int moe_disp_set;
    float moe_aux_scale;     /* the backward's d(loss)/d(aux) per sample: coef * loss_scale * seq */
    float *moe_host_scratch; /* host [work_B, E]: block_scratch.moe_host of every micro-batch */
    float *moe_cp_host;      /* moe_cp_scratch's */
    size_t moe_cp_cap;
    /* the MoE blocks' memory that follows the routing (moe_held), told to
     * the observer as it comes and goes (model_set_mem_observer), and the
     * fewest and most rows that arrived at one block's experts (model_moe_rows) */
    void (*mem_observer)(void *ctx, long long bytes);
    void *mem_ctx;
    int moe_rows_min, moe_rows_max; /* -1, 0 before any */
};

/* Tensor i of a held unit, from the unit's CURRENT buffers (a strategy may have
 * rebound them in a hook, so callers re-derive these per unit, never cache).
 * Always fp32: under bf16 the unit's working copies (the unit being computed). */
float *unit_tensor(model *m, int unit, int i);
/* A weight matrix as the GEMMs read it: of the activations' type (model.act),
 * the unit's current bf16 parameters themselves under mixed precision (no
 * widening: ops.h), else unit_tensor's. */
const void *unit_weight(model *m, int unit, int i);
float *unit_tensor_grad(model *m, int unit, int i);
/* grad(tensor i of unit) += src (n floats), for a unit that need not be the one
 * being computed (the tied wte's head copy): into its fp32 gradients, its
 * working gradient, or its bf16 gradients with one rounding. */
void unit_grad_add(model *m, int unit, int i, const float *src, size_t n);

/* The MLP's GELU (model.activation: tanh, or exact erf) and the layernorms'
 * eps (model.norm_eps), as the job says. */
static inline void model_gelu_forward(const model *m, void *out, const void *inp, size_t n)
{
    (m->spec.activation == ACT_GELU ? m->ops->gelu_erf_forward : m->ops->gelu_forward)(out, inp, n, m->act);
}
static inline void model_gelu_backward(const model *m, float *dinp, const void *inp, const float *dout, size_t n)
{
    (m->spec.activation == ACT_GELU ? m->ops->gelu_erf_backward : m->ops->gelu_backward)(dinp, inp, dout, n,
                                                                                           m->act);
}
/* Whether block unit `unit` is an MoE block (model.moe). */
static inline int block_is_moe(const model *m, int unit)
{
    return unit >= 1 && unit <= m->spec.n_layer && job_moe_block(&m->spec, unit - 1);
}
/* p advanced by n elements of the activations' type */
static inline void *act_at(const model *m, const void *p, size_t n) { return dt_at(p, n, m->act); }
static inline float model_norm_eps(const model *m) { return (float)job_model_norm_eps(&m->spec); }

/* The plain local layers (no tensor parallelism), computing on m->ops. */
void model_local_layers(model *m, model_layers *out);
/* The local attention (no context parallelism), as model.attention says:
 * fused, the blockwise ops (ops->attention_block_*) over one block; naive,
 * ops->attention_forward / _backward. */
void model_local_attention(model *m, model_attention *out);
void model_hook_before(model *m, int unit, model_phase phase);
void model_hook_after(model *m, int unit, model_phase phase);

/* What one transformer block keeps from its forward for its backward. N_l:
 * the rows this rank holds (rows_local: N, or N / tp with sequence parallelism).
 * The tensors are activations of the model's type (model.act: fp32, or bf16
 * under mixed precision, each rounded once where it is written); the
 * statistics are fp32. */
typedef struct {
    void *ln1;                        /* [N_l,C] */
    float *ln1_mean, *ln1_rstd;       /* [N_l], [N_l] */
    void *qkv;                        /* [N, 3*C_l] */
    void *att;                        /* the attention's stat (model_attention): naive,
                                         [B, NH_l, seq, seq] softmax probabilities, of the
                                         activations' type (selective recompute:
                                         block_scratch.att_shared); fused or context
                                         parallelism, [B, NH_l, seq] log-sum-exp, fp32 */
    void *atty;                       /* [N, C_l] attention output, before proj */
    void *r2;                         /* [N_l,C] x + attention branch */
    void *ln2;                        /* [N_l,C] */
    float *ln2_mean, *ln2_rstd;       /* [N_l], [N_l] */
    void *fch, *fchg;                 /* [N, F_l] fc output, after GELU; an MoE block's
                                         shared experts' [N, Hs], [N, Fs] (NULL without) */
    /* an MoE block's (moe.c), else NULL: the router's and the routed experts' */
    float *moe_scores;                /* [N, E] fp32: the router's scores (its logits, in place) */
    float *moe_w;                     /* [N, k] fp32: the chosen experts' weights */
    int *moe_idx, *moe_dst;           /* [N, k]: the chosen experts; each choice's permuted row */
    int *moe_src;                     /* [N k]: each permuted row's token row */
    void *moe_y;                      /* [N k, C]: the experts' outputs of this rank's choices (the
                                         router's gradient reads them) */
    moe_held *moe_rows;               /* this rank's experts' rows as they arrived: their input
                                         [Ml, C], first GEMM [Ml, He] and its activation [Ml, Fe]
                                         (moe.c; held from the forward to the backward), in
                                         model_acts.moe_held (copies of the set share it) */
    int *moe_counts;                  /* host [3 E]: rows each expert keeps (the route's), then
                                         the dispatcher's (model_moe_route counts_l) */
    int *moe_chosen;                  /* host [2 B, E]: each sample's choices of each expert (before
                                         any drop; under cp the whole sample's, all ranks') */
} block_acts;

/* What a block's weight gradients need besides the inputs its micro-batch keeps
 * anyway (ln1, atty, ln2, fchg): its four matmuls' output gradients, kept from
 * a zero-bubble pipeline's B pass to its W pass (model_backward_input /
 * model_backward_weight). Never under sequence parallelism, so N rows. In fp32
 * they mostly live in stash tensors B no longer reads (acts.c), so B writes
 * each only once that tensor is dead. */
typedef struct {
    float *dy;   /* [N, C]     the MLP projection's: the block's output gradient */
    float *dfch; /* [N, F_l]   fc's (the GELU's input gradient) */
    float *dr2;  /* [N, C]     the attention projection's */
    float *dqkv; /* [N, 3*C_l] qkv's */
} block_wkeep;

/* Gradient scratch for one block's backward, shared by all blocks (they run
 * one after the other). Two buffers cover four gradients because their lives
 * do not overlap: dA holds d(gelu out) and later d(qkv); dB holds d(fc out)
 * and later d(attention out). */
typedef struct {
    float *dln;         /* [N,C]  d(ln1 or ln2 output), also the head's d(lnf); in
                           forward the row layers' fp32 output before the residual
                           add (the branch, [N_l, C]) */
    float *dA;          /* [N, max(F_l, 3*C_l)] */
    float *dB;          /* [N, max(F_l, C_l)] */
    float *att_scratch; /* the attention's (model_attention): naive [B, NH_l, seq, seq],
                           fused [N, 4 C_l] floats (k, v packed in the activations'
                           type, then their gradient, fp32, from float 2 N C_l on),
                           NULL under context parallelism */
    /* selective recompute with naive attention only (else NULL): [B, NH_l, seq, seq] the softmax
     * probabilities of every block, each block_acts.att pointing here. A block's
     * forward writes them and the next block's overwrites them, so its backward
     * recomputes them from its kept qkv before the attention backward. Of
     * the activations' type. */
    void *att_shared;
    /* elementwise recompute only (else NULL): what the blocks' forward writes and
     * their backward rebuilds, of the activations' type: el_ln [N_l, C] the
     * norm output of the moment (ln1, then ln2: their lives do not overlap),
     * el_act [N, F_l] a dense Llama block's SwiGLU product. Every block's
     * ln1, ln2 (and fchg) point here instead of into its stash. */
    void *el_ln, *el_act;
    /* sequence parallelism only (else NULL): */
    void *full;         /* [N,C] floats: gathered rows (layernorm outputs, the stream's
                           gradient) and row-parallel partial sums; the embedding's
                           and the ViT head's whole stream */
    float *ln_grads;    /* [4*C] a unit's layernorm gradients of one micro-batch
                           (model_ln_grads_begin) */
    /* train.lora only (else NULL): */
    float *norm_sink;   /* [4*C] where the frozen norms' weight gradients go (and are dropped) */
    model_lora lora;    /* the adapters' scratch (lora.h; block.c fills the rest per layer) */
    long long *lora_rows; /* [N] each row's token number in the global batch (dropout > 0) */
    /* Packed samples (job_model.packed): the micro-batch's document mask,
     * pointing at its stash (model_acts.seg, host_seg); else NULLs */
    model_docs docs;
    /* Llama only (else NULL), made with the working set and kept by it
     * (packed samples: rope_pos is the micro-batch's model_acts.pos): */
    int *rope_pos;      /* [N] each local row's position in its sample (global under cp) */
    float *rope_cs;     /* [seq_len, hs] RoPE's cos / sin table (ops.h rope_table) */
    /* Llama with kv heads replicated over tp (llama_qkv_wgrad_*), else NULL: */
    float *kv_dw;       /* [W_l, C] one micro-batch's qkv weight gradient */
    float *kv_all;      /* [2 n_kv_head hs, C] every kv head's k then v rows, summed over tp */
    /* MoE blocks only (else NULL; moe.c): */
    float *moe_dw;      /* [N, k] d(weights) */
    float *moe_dlogits; /* [N, E] */
    float *moe_aux;     /* [B, E] the balance probabilities' sums (forward), their gradient (backward) */
    int *moe_chosen;    /* [2 B, E] the route's per-sample (per-chunk under cp) counts, device */
    int *moe_before;    /* [2 B, E] device: cp's capacity (moe_bufs before_dev) */
    int *moe_counts;    /* [E] device */
    float *moe_host;    /* host [B, E]: the sums above, or their gradient, on their way */
} block_scratch;

/* Layernorm weight and bias gradients under sequence parallelism: each rank's
 * rows give part of the sum, so a unit collects this micro-batch's part in
 * block_scratch.ln_grads (zeroed here, returned), then model_ln_grads_finish
 * sums it over tp once and adds it to the n gradient tensors dst[i] (C floats
 * each, in the scratch's order). Without SP the gradients accumulate directly. */
float *model_ln_grads_begin(model *m, const block_scratch *s, int n);
void model_ln_grads_finish(model *m, const block_scratch *s, float *const *dst, int n);

/* One micro-batch's activations. What it keeps from forward to backward (the
 * stash) lives in its own allocation; the rest points into the working set its
 * model shares among all micro-batches (model.work_mem, acts.c). */
struct model_acts {
    model *m;
    struct model_acts *next; /* the model's list of live ones (they share its working set) */
    int B;              /* capacity: batches of up to B samples */
    void *mem;          /* the stash: one ops->alloc of model_acts_sizes().stash, or
                           (mem_borrowed) memory lent by model_acts_bind_stash */
    int mem_borrowed;
    size_t bytes;
    size_t kept_attn_in, kept_mlp_in; /* model_acts_kept */
    /* ---- stash (tensors of the activations' type, model.act) ---- */
    void *stream;       /* [N_l,C] entering each block held, then (with the head) the head */
    block_acts *blk;    /* one set per block held (none with block recompute) */
    /* ---- stash in host memory (model_precision.acts_on_host): the stream
     * entering blocks 1 .. n-1 (stream then holds entry 0 only) ---- */
    void *host_mem;     /* one ops->host_alloc of model_acts_sizes().host */
    void *hstream;
    void *xbuf[2];      /* [N_l,C] in the working set: where an offloaded entry
                           is written before it crosses down, and lands when it
                           comes back up */
    void *pend[2];      /* the copy (ops->copy_start) still using xbuf[k % 2] */
    /* The stream leaving the shard: with the head the stash's last entry (the
     * head's input), without it the working set's (sent, or copied by the next
     * chunk, before the chunk's next forward). */
    void *out;
    /* ---- working set (shared) ---- */
    void *doutput;      /* [N_l,C] received from the next stage (NULL with the head) */
    float *dres;        /* [N_l,C] the residual gradient, fp32, propagated in place (the
                           input gradient a stage sends in fp32); in bf16 also the
                           embedding's fp32 output before it is rounded into the stream */
    void *dinput;       /* bf16: [N_l,C] the input gradient a stage sends, rounded */
    block_acts work_blk; /* the set a block computes in under block recompute */
    int work_blk_on;
    block_scratch bs;
    /* packed samples (job_model.packed), else NULL: the micro-batch's */
    int *pos;           /* [N] each local row's position in its sample (device) */
    int *seg;           /* [cp][B][seq] every cp rank's rows' segments (model_docs, device) */
    int *host_pos, *host_seg; /* host copies, malloc'd ([N whole samples] each) */
    /* GPT embedding */
    int *tokens;        /* [N] device copy of the batch's tokens */
    /* GPT head */
    int *targets;       /* [N] */
    void *lnf;          /* [N,C] (ViT: [B,C]), activations' type */
    float *lnf_mean, *lnf_rstd;         /* [N_l], [N_l] (ViT: [B]) */
    float *logits;      /* GPT: [min(head rows, N), V_l] one chunk, in the working set
                           (model_vocab_head); ViT: [B, n_classes] in the stash */
    float *rowmax, *sumexp, *target, *loss, *dloss; /* [N] (ViT: [B]) */
    float *dlogits;     /* ViT: [B, n_classes]; GPT: NULL (in place in logits) */
    float *tied_dwte;   /* [V_l, C] when one object holds wte and its tied copy */
    float *wpe_l;       /* context parallelism: [seq, C] the wpe rows of this rank's
                           chunks (forward), their gradient (backward) */
    /* ViT embedding */
    float *images;      /* [B, ch, S, S] */
    float *patch_out;   /* [B, NP, C] patch projections; in backward their gradient */
    float *cls_tmp;     /* [B, C] class-token rows (embedding backward) */
    /* ViT head */
    int *labels;        /* [B] */
    void *cls_x;        /* [B, C] the class-token rows of the last stream (activations' type) */
    float *dcls_x;      /* [B, C] */
    /* host mirrors (malloc, not device memory) */
    float *host_loss;   /* [N] */
    float *host_dloss;  /* [N] */
    float *host_logits; /* ViT: [B, n_classes] */
    /* zero-bubble pipelines only (model_acts_create_split), else NULL: one set per
     * block held, in its own allocation of model_acts_wkeep_bytes */
    block_wkeep *wk;
    void *wk_mem;
    /* MoE: host memory of each block set's moe_counts and moe_chosen, and
     * the holders of their experts' rows (block_acts; [sets + 1], the last
     * the working set's block) */
    int *moe_host;
    moe_held *moe_held;
};

/* A block's tensors by role (block.c): GPT's and ViT's BLK_* in their order;
 * a Llama's have no biases (NULL), its qkv weight is the packed q, k, v and
 * its fc weight the packed gate|up. */
enum {
    BR_LN1_W, BR_LN1_B, BR_QKV_W, BR_QKV_B, BR_PROJ_W, BR_PROJ_B,
    BR_LN2_W, BR_LN2_B, BR_FC_W, BR_FC_B, BR_MPROJ_W, BR_MPROJ_B,
    /* an MoE block's (NULL in a dense one; its fc and mproj roles NULL):
     * the router, the routed experts' first (GPT fc, Llama gate_up) and
     * second (proj, down) matrices, the shared experts' (a Llama's SH_FC
     * the packed gate|up) */
    BR_ROUTER_W, BR_EXP_FC_W, BR_EXP_PROJ_W, BR_SH_FC_W, BR_SH_PROJ_W, BLK_ROLES
};
typedef struct {
    const float *p[BLK_ROLES]; /* tensors (fp32: the vectors are read so) */
    const void *w[BLK_ROLES];  /* the weight matrices as the GEMMs read them (unit_weight) */
    float *g[BLK_ROLES];       /* their gradients (NULL without with_grads, or frozen) */
    /* train.lora: each target's A and B (NULL when not adapted) and their gradients */
    const void *la[LORA_N_TARGETS], *lb[LORA_N_TARGETS];
    float *gla[LORA_N_TARGETS], *glb[LORA_N_TARGETS];
} block_params;
/* From the unit's current buffers: a strategy may have rebound them in
 * before(). what: BIND_PARAMS (p, w), BIND_GRADS (g); the others NULL. */
enum { BIND_PARAMS = 1, BIND_GRADS = 2 };
void block_bind(model *m, int unit, block_params *bp, int what);

/* The linear layers of a block LoRA may adapt. */
typedef enum { LORA_LAYER_QKV = 0, LORA_LAYER_PROJ, LORA_LAYER_FC, LORA_LAYER_MPROJ } lora_layer;
/* The adapters of one layer of block `unit` (lora.h), from its bound
 * parameters (BIND_GRADS: with their gradients) and the scratch in `s`
 * (the working set's, or a decoding step's): into *out, returned; NULL when
 * the layer has none (the plain layer then runs, bit for bit as without
 * LoRA). */
const model_lora *block_lora(model *m, int unit, lora_layer layer, const block_params *bp, const model_lora *s,
                             model_lora *out);

/* The block's norms and the head's: layernorm (GPT, ViT; mean and bias), or
 * RMSNorm (Llama: mean and bias unused, NULL) of N rows of d_model. */
void model_norm_forward(model *m, void *out, float *mean, float *rstd, const void *x, const float *w,
                        const float *b, int N);
void model_norm_backward(model *m, float *dx, float *dw, float *db, const float *dout, const void *x,
                         const float *w, const float *mean, const float *rstd, int N);

/* Llama's own pieces (llama.c). */
/* The working set's rope_pos and rope_cs for micro-batches of up to B samples
 * (model_acts_create, when the working set is made). */
void llama_rope_prepare(model *m, const block_scratch *s, int B);
/* Drops the model's hold on its activation scratch (acts.c; model_destroy). */
void model_scratch_release(model *m);
/* RoPE on q and k of the packed qkv [N, W_l] (each row at its sample position,
 * global under cp), and its backward on dqkv. */
void llama_rope_forward(model *m, void *qkv, const block_scratch *s, int N);
void llama_rope_backward(model *m, float *dqkv, const block_scratch *s, int N);
/* kv heads replicated over tp (tp above n_kv_head): the qkv weight gradient of
 * one micro-batch goes to a zeroed scratch (begin, returned), then q's rows
 * are added to the unit's gradient and k's and v's summed over the replicas
 * first (finish; model_layers.rows_grad_sum), so each replica's k and v get
 * the gradient of every query head that reads them. */
float *llama_qkv_wgrad_begin(model *m, const block_scratch *s);
void llama_qkv_wgrad_finish(model *m, int unit, const block_scratch *s);

/* A dense MLP's first layer and its activation through layers L (the
 * model's, or its local ones): h [N, H] = in w^T + b (column layer), g [N,
 * F] its GELU (H = F) or a Llama's SwiGLU (H = 2 F). The dense block's, and
 * the shared experts'. lo: train.lora's adapter on the first layer, or NULL
 * (lora.h). */
void block_mlp_in(model *m, const model_layers *L, void *h, void *g, const void *in, void *full, const void *w,
                  const float *b, int N, int H, int F, const model_lora *lo);
/* The second layer's backward (out = g w^T + b, row layer) and the
 * activation's: dh [N, H] (the first layer's output gradient) from dout,
 * dg [N, F] scratch; dw, db accumulate. lo: train.lora's adapter on the
 * second layer, or NULL. */
void block_mlp_out_backward(model *m, const model_layers *L, const void *h, const void *g, const void *w, float *dw,
                            float *db, const float *dout, void *full, float *dh, float *dg, int N, int H, int F,
                            const model_lora *lo);

/* ---- an MoE block's MLP (moe.c) ----
 * Where one MoE forward computes: a training block's kept tensors and the
 * working set (moe_bufs_of), or a decoding step's one-row buffers. */
typedef struct {
    float *scores, *w;          /* [N, E] (the logits, then the scores in place), [N, k] */
    int *idx, *dst, *src;       /* [N, k], [N, k], [N k] */
    int *counts_dev, *chosen_dev; /* [E], [2 G, E] device (per chunk under cp) */
    int *before_dev;            /* [2 G, E] device: cp's capacity, the choices before each chunk */
    float *psum;                /* [G, E] device: the balance loss's sums (NULL: not wanted) */
    int *counts, *chosen;       /* host [3 E] (the route's, then the dispatcher's
                                   model_moe_route counts_l), [2 G, E]: each whole
                                   sample's choices [G, E] once the forward is done */
    float *host;                /* host [G, E] scratch */
    void *xe, *h, *g;           /* [Ml, C], [Ml, He], [Ml, Fe]: this rank's experts' rows, as many
                                   as arrive (Ml); with `held` placed there once they are known */
    void *y;                    /* [N k, C]: the experts' outputs of this rank's choices */
    void *ye;                   /* [Ml, C]: this rank's experts' outputs when the dispatcher
                                   moves rows (else y itself; with `held` allocated meanwhile) */
    moe_held *held;             /* a training block's (block_acts moe_rows): xe, h, g live there,
                                   sized by the arrived rows (moe_rows_bytes); NULL: the
                                   caller's (a decoding step's one row) */
    void *sh_h, *sh_g;          /* [N, Hs], [N, Fs]: the shared experts' (NULL without) */
    void *full;                 /* [N, C] floats under sequence parallelism (block_scratch.full:
                                   the gathered input, the partial sums), else NULL */
} moe_bufs;
moe_bufs moe_bufs_of(const block_acts *a, const block_scratch *s);
/* The bytes of an MoE block's experts' rows on this model's shard (the one
 * rule model_moe_rows_sizes prices): kept (xe, h, g; acts type), grads (the
 * backward's d(output) / d(input) [rows, C], dg [rows, Fe], dh [rows, He],
 * fp32), out (the experts' outputs before they travel back, [rows, C]). */
size_t moe_rows_kept_bytes(const model_dims *d, size_t e, size_t rows);
size_t moe_rows_grad_bytes(const model_dims *d, size_t rows);
size_t moe_rows_out_bytes(const model_dims *d, size_t e, size_t rows);
/* held's memory for `bytes` (the old freed first), and its release; the
 * observer told. Aborts when the device has no more (as ep.c's staging). */
void moe_hold(model *m, moe_held *held, size_t bytes);
void moe_release(model *m, moe_held *held);
/* branch fp32 (this rank's rows) = the block's MoE MLP of x_rows (its
 * norm's output, type model.act; this rank's rows of the N: all of them, or
 * its 1/tp under sequence parallelism), N rows of samples of T (groups of
 * capacity and balance loss). Under tensor parallelism every tp rank routes
 * all N rows alike and computes its columns of every expert (the shared
 * ones too); the partial outputs are summed over tp once
 * (model_layers.partial_sum). branch NULL (a block recompute's forward):
 * stops once what the backward reads exists. count: add to the model's
 * statistics. */
void moe_forward(model *m, int unit, const block_params *bp, const moe_bufs *b, const void *x_rows, float *branch,
                 int N, int T, int count);
/* d(x) of the MoE MLP from dbranch (this rank's rows), into dx [N, C]
 * (scratch, overwritten): returns where this rank's rows of it are (dx
 * itself without sequence parallelism). Its parameters' gradients
 * accumulate, the balance loss's included (m->moe_aux_scale). */
const float *moe_backward(model *m, int unit, const block_params *bp, const moe_bufs *b, const block_scratch *s,
                          const void *x_rows, const float *dbranch, float *dx, int N, int T);
/* moe_state.c, moe_dispatch.c; moe_cp_scratch: host floats (at least n) for
 * context parallelism's gathers, kept by the model and grown as needed (NULL
 * never: out of memory aborts, as a kernel's would) */
float *moe_cp_scratch(model *m, size_t n);
int moe_state_create(model *m);
void moe_state_destroy(model *m);
int moe_slot_of(const model *m, int unit); /* the held MoE block's index, -1: dense */
void moe_stats_add(model *m, int slot, const int *chosen, int G, int M, double aux);
const float *moe_bias_of(const model *m, int slot);

/* Block forward: y = block(x). With `recomputing` it stops once the tensors its
 * backward reads exist (the MLP projection's output y is not needed then). */
void block_forward(model *m, int unit, const void *x, void *y, block_acts *a,
                   const block_scratch *s, int B, int recomputing);
/* Block backward: dres holds dL/dy on entry and dL/dx on return (in place).
 * keep NULL: everything, weight gradients included. Else the B pass of a
 * zero-bubble pipeline: all but the four matmuls' weight and bias gradients,
 * whose output gradients go to keep for block_backward_weight (the layernorms'
 * weight gradients stay here: they come out of the pass that makes the input
 * gradient, and deferring them would keep two more [N, C] per block). */
void block_backward(model *m, int unit, float *dres, const void *x, const block_acts *a,
                    const block_scratch *s, int B, const block_wkeep *keep);
/* The W pass: the four matmuls' weight and bias gradients from keep and the
 * block's kept inputs (block_weight.c). Local on every layer without sequence
 * parallelism (a tp rank's weight gradient needs no other rank's data). */
void block_backward_weight(model *m, int unit, const block_acts *a, const block_wkeep *keep,
                           const block_scratch *s, int B);

/* The LM head's matrix in the head unit: GPT's tied copy of wte, a Llama's
 * lm_head (or its tied wte); and the final norm's bias (NULL: RMSNorm). The
 * final norm's gain is tensor 0 of the head (GPT_HEAD_LNF_W, LLAMA_HEAD_NORM). */
static inline int lm_head_w(const model *m) { return m->spec.kind == MODEL_LLAMA ? LLAMA_HEAD_W : GPT_HEAD_WTE; }
_Static_assert((int)GPT_HEAD_LNF_W == (int)LLAMA_HEAD_NORM && (int)GPT_EMB_WTE == (int)LLAMA_EMB_WTE,
               "the language models' final norm gain and wte sit at the same index");

/* The language models' unit 0 and head (gpt.c): GPT's, and a Llama's. */
/* Packed samples: the micro-batch's positions (this rank's rows) and segments
 * (every cp rank's rows) from the batch into its stash (model_forward). */
void gpt_docs_from_batch(model *m, model_acts *a, const model_batch *batch);
void gpt_embedding_forward(model *m, model_acts *a, const model_batch *batch, float *out);
void gpt_embedding_backward(model *m, model_acts *a, const float *dres, int B);
double gpt_head_forward(model *m, model_acts *a, const model_batch *batch, const void *x);
void gpt_head_backward(model *m, model_acts *a, const model_batch *batch, const void *x,
                       float *dres, float loss_scale);
/* With the embedding and the tied head in one object: both wte copies get the
 * micro-batch's whole wte gradient (see model_backward). */
void gpt_tied_grads_finish(model *m, model_acts *a);

/* ViT unit 0 and head (vit.c). */
void vit_embedding_forward(model *m, model_acts *a, const model_batch *batch, float *out);
void vit_embedding_backward(model *m, model_acts *a, const float *dres, int B);
double vit_head_forward(model *m, model_acts *a, const model_batch *batch, const void *x,
                        int *correct);
void vit_head_backward(model *m, model_acts *a, const model_batch *batch, const void *x,
                       float *dres, float loss_scale);

#endif
