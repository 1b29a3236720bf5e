/* acts.c — the activation buffers of one micro-batch.
 *
 * One layout function places every buffer in a single allocation; it runs once
 * without memory to size it (model_acts_bytes, which the dry-run prints) and once
 * with memory to hand out pointers (model_acts_create). So the reported size and
 * the allocated size cannot drift apart. */
#include "runtime/model/model_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>

typedef struct {
    char *base; /* NULL while only sizing */
    size_t off;
    /* bytes of the blocks' kept inputs of attention (ln1, qkv) and of the MLP
     * (ln2, fch, fchg): model_acts_kept */
    size_t attn_in, mlp_in;
} bump;

/* The scratch part of the working set, maybe shared by several models
 * (model_share_scratch). */
struct model_scratch {
    void *mem;
    size_t bytes;
    int refs;
};

static void *take(bump *b, size_t bytes)
{
    size_t at = b->off;
    b->off += acts_align(bytes);
    return b->base ? b->base + at : NULL;
}

static float *takef(bump *b, size_t n) { return take(b, n * sizeof(float)); }
static int *takei(bump *b, size_t n) { return take(b, n * sizeof(int)); }

static size_t max_sz(size_t x, size_t y) { return x > y ? x : y; }

/* Sets of block_acts kept per micro-batch: one per block, none with block
 * recompute (each block's forward is rerun in its backward, in the shared set). */
static int blk_sets(int nb, recompute_kind rc) { return nb == 0 || rc == RECOMPUTE_BLOCK ? 0 : nb; }

typedef struct {
    const job_model *spec;
    const model_shard *sh;
    recompute_kind rc;
    int bf16;
    size_t e; /* bytes of an activation's element (model.act) */
    model_dims d;
    int has_emb, has_head, nb, sp, gpt, cp; /* gpt: a language model (gpt or llama) */
    int llama; /* RMSNorm (no means kept), rotary positions (their table and rows' positions), no wpe */
    int docs;  /* packed samples (job_model.packed): per micro-batch positions and segments */
    int tied;  /* the LM head is wte */
    int lse; /* the attention keeps each row's log-sum-exp (model_attention_lse) */
    int off; /* the stream entering blocks 1 .. nb-1 in host memory (acts_on_host) */
    int lora; /* train.lora: frozen base, adapters (lora.h) */
    int first_layer;          /* the first held block's index (0-based) */
    int has_dense, has_moe;   /* the held blocks include dense ones, MoE ones (model.moe) */
} shape;

/* The attention statistics one block keeps: its softmax probabilities [B,
 * NH_l, seq, seq] (naive), or its rows' log-sum-exp [B, NH_l, seq] (fused,
 * context parallelism: the blockwise backward recomputes the probabilities
 * block by block). */
static size_t att_numel(const shape *g, int B)
{
    size_t n = (size_t)B * (size_t)g->d.NH_l * (size_t)g->d.seq;
    return g->lse ? n : n * (size_t)g->d.seq;
}

/* The attention's scratch in the working set (model_attention): naive, the
 * backward's [B, NH_l, seq, seq]; fused without cp, k and v packed for the
 * blockwise ops and then their gradient, [N, 4 Ckv_l] (4 C_l without GQA);
 * under cp none (the ring's own buffers, cp.c). */
static size_t att_scratch_numel(const shape *g, int B)
{
    if (g->cp) return 0;
    if (g->lse) return (size_t)B * (size_t)g->d.seq * 4 * (size_t)g->d.Ckv_l;
    return att_numel(g, B);
}

static shape shape_of(const job_model *spec, const model_shard *sh, recompute_kind rc, const model_precision *prec)
{
    shape g = {.spec = spec, .sh = sh, .rc = rc, .bf16 = prec && prec->bf16};
    g.e = g.bf16 ? sizeof(uint16_t) : sizeof(float);
    model_dims_of(spec, sh, &g.d);
    int L = spec->n_layer;
    g.has_emb = sh->unit_begin == 0;
    g.has_head = sh->unit_end == L + 2;
    int first = sh->unit_begin > 1 ? sh->unit_begin : 1;
    int last = sh->unit_end - 1 < L ? sh->unit_end - 1 : L;
    g.nb = last >= first ? last - first + 1 : 0;
    g.sp = g.d.sp_size > 1;
    g.gpt = job_model_is_lm(spec);
    g.llama = spec->kind == MODEL_LLAMA;
    g.docs = spec->packed && g.gpt;
    g.tied = job_model_tied_head(spec);
    g.cp = g.d.cp_size > 1;
    g.lse = model_attention_lse(spec, g.d.cp_size);
    g.off = prec && prec->acts_on_host && rc == RECOMPUTE_BLOCK && g.nb > 1;
    g.lora = job_lora_on(spec);
    g.first_layer = first - 1;
    for (int k = 0; k < g.nb; k++) {
        if (job_moe_block(spec, g.first_layer + k)) g.has_moe = 1;
        else g.has_dense = 1;
    }
    return g;
}

/* The GPT head's chunk of logits: [min(rows, N), V_l] fp32 (model_vocab_head). */
static size_t head_chunk_numel(const shape *g, int B)
{
    size_t N = (size_t)B * (size_t)g->d.seq, rows = (size_t)model_head_chunk_rows(g->spec);
    return (rows < N ? rows : N) * (size_t)g->d.V_l;
}

/* Which MLP a block set serves: a dense block's, an MoE block's, or (the
 * shared set block recompute rebuilds each block in) either. */
enum { MLP_DENSE = 1, MLP_MOE = 2 };

static int block_mlp(const shape *g, int k)
{
    return job_moe_block(g->spec, g->first_layer + k) ? MLP_MOE : MLP_DENSE;
}

static int held_mlps(const shape *g) { return (g->has_dense ? MLP_DENSE : 0) | (g->has_moe ? MLP_MOE : 0); }

/* One block's tensors (elements of e bytes: the activations' type) and, with
 * `stats`, its layernorm statistics and attention log-sum-exp (fp32); a
 * recompute working set without them borrows the stash's (bf16 keeps the
 * statistics in the stash: they are cheap). An MoE block (mlp MLP_MOE)
 * keeps its router's scores, choices, weights and route and the experts'
 * outputs of its N k choices, and its shared experts' MLP tensors in fch,
 * fchg; the experts' own rows (their input, hidden activations) are sized by
 * what arrives, outside this layout (block_acts moe_rows, moe.c). */
static void take_block(bump *b, const shape *g, int B, block_acts *s, void *att_shared, int stats, int mlp)
{
    size_t N = (size_t)B * (size_t)g->d.seq, C = (size_t)g->d.C, Nl = (size_t)rows_local(&g->d, B);
    size_t att = att_numel(g, B), e = g->e;
    size_t C_l = (size_t)g->d.C_l, W_l = (size_t)g->d.W_l;
    /* the MLP's hidden tensors, in elements: a dense block's, or an MoE
     * block's shared experts', over all N rows (tp-split columns) */
    size_t H = 0, F = 0;
    if (mlp & MLP_DENSE) H = N * (size_t)g->d.H_l, F = N * (size_t)g->d.F_l;
    if (mlp & MLP_MOE) H = max_sz(H, N * (size_t)g->d.Hs), F = max_sz(F, N * (size_t)g->d.Fs);
    /* elementwise recompute: the norms' outputs (and a dense Llama block's
     * SwiGLU product) live in the working set (block_scratch el_ln, el_act),
     * rebuilt in backward, not kept (the stats are: the norm backward reads
     * them) */
    int el = stats && g->rc == RECOMPUTE_ELEMENTWISE, el_act = el && g->llama && mlp == MLP_DENSE;
    size_t ln = el ? 0 : Nl * C;
    /* RMSNorm keeps no mean */
    s->ln1 = el ? NULL : take(b, ln * e);
    if (stats) s->ln1_mean = g->llama ? NULL : takef(b, Nl), s->ln1_rstd = takef(b, Nl);
    s->qkv = take(b, N * W_l * e);
    b->attn_in += (ln + N * W_l) * e;
    b->mlp_in += (ln + H + (el_act ? 0 : F)) * e;
    if (g->lse) s->att = stats ? takef(b, att) : NULL; /* the statistic */
    else s->att = g->rc == RECOMPUTE_SELECTIVE ? att_shared : take(b, att * e);
    s->atty = take(b, N * C_l * e);
    s->r2 = take(b, Nl * C * e);
    s->ln2 = el ? NULL : take(b, ln * e);
    if (stats) s->ln2_mean = g->llama ? NULL : takef(b, Nl), s->ln2_rstd = takef(b, Nl);
    s->fch = H ? take(b, H * e) : NULL;
    s->fchg = F && !el_act ? take(b, F * e) : NULL;
    if (!(mlp & MLP_MOE)) return;
    /* the rows every tp rank routes alike: all N (gathered under sequence
     * parallelism); the experts' hidden columns split over tp (He, Fe) */
    size_t E = (size_t)g->d.E, k = (size_t)g->d.k, Nk = N * k;
    size_t before = b->off;
    s->moe_scores = takef(b, N * E);
    s->moe_w = takef(b, Nk);
    s->moe_idx = takei(b, Nk);
    s->moe_dst = takei(b, Nk);
    s->moe_src = takei(b, Nk);
    s->moe_y = take(b, Nk * C * e);
    b->mlp_in += b->off - before;
}

/* What one micro-batch keeps from its forward for its backward (the stash: a
 * pipeline stage holds one per micro-batch in flight): the residual stream
 * entering every block (block recompute restarts each block from its input)
 * and, with the head, entering the head; each block's tensors (none with block
 * recompute; no attention probabilities with selective), the batch's device
 * copy and the head's input (the final layernorm's output) and loss
 * statistics, not its logits (the chunked head computes them again in
 * backward). Elements are bf16 under mixed precision, except statistics,
 * logits and losses (fp32). Not kept: a
 * stage's output without the head and the output gradient it receives (the
 * working set holds them: output only until it is sent, the gradient only
 * until the micro-batch's backward reads it), so a 1-layer chunk under full
 * recompute keeps 2 s.b.h bytes in bf16, Korthikanti et al.'s count. */
static void layout_stash(const shape *g, int B, model_acts *a, bump *b)
{
    size_t N = (size_t)B * (size_t)g->d.seq, C = (size_t)g->d.C;
    size_t Nl = (size_t)rows_local(&g->d, B), e = g->e;
    int nb = g->nb, ins = g->off ? 1 : nb, kept = ins + g->has_head; /* offloaded: entry 0 stays */
    a->stream = take(b, (size_t)kept * Nl * C * e);
    if (g->has_head) a->out = a->stream ? (char *)a->stream + (size_t)ins * Nl * C * e : NULL;
    for (int k = 0; k < blk_sets(nb, g->rc); k++)
        take_block(b, g, B, a->blk ? &a->blk[k] : &(block_acts){0}, a->bs.att_shared, 1, block_mlp(g, k));
    if (g->docs && (g->has_emb || nb > 0)) {
        /* packed samples: the micro-batch's rows' positions (wpe's rows, RoPE's
         * angles) and every cp rank's rows' segments (the attention's mask) */
        a->pos = takei(b, N);
        a->seg = nb > 0 ? takei(b, N * (size_t)g->d.cp_size) : NULL;
        a->bs.docs = (model_docs){a->seg, a->seg ? a->host_seg : NULL};
        if (g->llama && nb > 0) a->bs.rope_pos = a->pos;
    }
    if (g->gpt) {
        if (g->has_emb) a->tokens = takei(b, N);
        if (g->has_head) {
            a->targets = takei(b, N);
            a->lnf = take(b, N * C * e);
            a->lnf_mean = g->llama ? NULL : takef(b, Nl);
            a->lnf_rstd = takef(b, Nl);
            a->rowmax = takef(b, N);
            a->sumexp = takef(b, N);
            a->target = takef(b, N);
            a->loss = takef(b, N);
            a->dloss = takef(b, N);
        }
    } else {
        size_t K = (size_t)g->spec->n_classes, Bs = (size_t)B;
        if (g->has_emb)
            a->images = takef(b, Bs * (size_t)g->spec->channels * (size_t)g->spec->image_size *
                                     (size_t)g->spec->image_size);
        if (g->has_head) {
            a->labels = takei(b, Bs);
            a->cls_x = take(b, Bs * C * e);
            a->lnf = take(b, Bs * C * e);
            a->lnf_mean = takef(b, Bs);
            a->lnf_rstd = takef(b, Bs);
            a->logits = takef(b, Bs * K);
            a->rowmax = takef(b, Bs);
            a->sumexp = takef(b, Bs);
            a->target = takef(b, Bs);
            a->loss = takef(b, Bs);
            a->dloss = takef(b, Bs);
        }
    }
}

/* train.offload: activations: the stream entering blocks 1 .. nb-1, in host
 * memory (the stash's part that leaves the device). */
static void layout_host(const shape *g, int B, model_acts *a, bump *b)
{
    if (!g->off) return;
    size_t n = (size_t)(g->nb - 1) * (size_t)rows_local(&g->d, B) * (size_t)g->d.C;
    a->hstream = take(b, n * g->e);
}

/* train.lora's part of the working set (lora.h model_lora): the frozen
 * norms' gradient sink [4 C] (the blocks' and the head's), and for the
 * blocks' adapted layers, over N = B x seq rows (the layers' whole rows):
 * an adapted column layer's fp32 sum and a row layer's delta [N, max OC],
 * one target's columns [N, max cols], h and its gradient [N, r] (bf16: h
 * rounded too), and with dropout the dropped-out input [N, max IC], its
 * gradient and each row's token number [N]. */
static void layout_lora(const shape *g, int B, model_acts *a, bump *b)
{
    model_lora *l = &a->bs.lora;
    memset(l, 0, sizeof *l);
    a->bs.norm_sink = NULL;
    a->bs.lora_rows = NULL;
    if (!g->lora || !g->gpt) return;
    size_t N = (size_t)B * (size_t)g->d.seq, C = (size_t)g->d.C, r = (size_t)g->spec->lora.rank;
    size_t oc = max_sz(max_sz((size_t)g->d.W_l, (size_t)g->d.H_l), C);
    size_t cols = max_sz(max_sz((size_t)g->d.C_l, (size_t)g->d.Ckv_l), (size_t)g->d.F_l);
    size_t ic = max_sz(max_sz(C, (size_t)g->d.C_l), (size_t)g->d.F_l);
    int drop = g->spec->lora.dropout > 0;
    if (g->nb > 0 || g->has_head) a->bs.norm_sink = takef(b, 4 * C);
    if (g->nb == 0) return;
    l->y = takef(b, N * oc);
    l->dt = takef(b, N * cols);
    l->h32 = takef(b, N * r);
    l->dh = takef(b, N * r);
    l->h = g->bf16 ? take(b, N * r * g->e) : NULL;
    l->xd = drop ? take(b, N * ic * g->e) : NULL;
    l->dxd = drop ? takef(b, N * ic) : NULL;
    a->bs.lora_rows = drop ? take(b, N * sizeof(long long)) : NULL;
    l->rows = a->bs.lora_rows;
}

/* The one working set a model object shares among all its micro-batches: a
 * stage's output and the output gradient it receives (without the head), the
 * residual gradient, backward scratch, the block set a recompute rebuilds,
 * gathers of sequence parallelism, the GPT head's chunk of logits (and their
 * gradient). Micro-batches never compute at the same time, so one serves
 * all. Two parts: b, the model's own (what outlives a compute call: the
 * tensors a pipeline sends, receives or hands to the next chunk, the rotary
 * tables made once, and the MoE blocks' buffers), and s, scratch that only
 * lives inside one forward or backward call, which the chunks of a pipeline
 * rank may share (they never compute at the same time either:
 * model_share_scratch). */
static void layout_work(const shape *g, int B, model_acts *a, bump *b, bump *s)
{
    size_t N = (size_t)B * (size_t)g->d.seq, C = (size_t)g->d.C;
    size_t Nl = (size_t)rows_local(&g->d, B);
    size_t att = att_numel(g, B);
    size_t C_l = (size_t)g->d.C_l, H_l = (size_t)g->d.H_l, F_l = (size_t)g->d.F_l, W_l = (size_t)g->d.W_l;
    size_t e = g->e;
    int nb = g->nb;

    if (!g->has_head) a->out = take(b, Nl * C * e), a->doutput = take(b, Nl * C * e);
    a->dres = takef(b, Nl * C);
    /* selective (naive attention): one [B, NH_l, seq, seq] for all blocks
     * instead of one each; with the lse kinds there is nothing to share */
    a->bs.att_shared = nb > 0 && g->rc == RECOMPUTE_SELECTIVE && !g->lse ? take(s, att * e) : NULL;
    /* elementwise: the one norm output and SwiGLU product the blocks share */
    int el = nb > 0 && g->rc == RECOMPUTE_ELEMENTWISE;
    a->bs.el_ln = el ? take(s, Nl * C * e) : NULL;
    a->bs.el_act = el && g->llama && g->has_dense ? take(s, N * F_l * e) : NULL;
    /* the set a block recomputes into (block recompute keeps none per block) */
    a->work_blk_on = nb > 0 && g->rc == RECOMPUTE_BLOCK;
    if (a->work_blk_on) take_block(s, g, B, &a->work_blk, a->bs.att_shared, 1, held_mlps(g));
    /* offloaded entries: two, so that one crosses while the next block computes */
    for (int i = 0; i < 2; i++) a->xbuf[i] = g->off ? take(b, Nl * C * e) : NULL;
    a->dinput = g->bf16 && !g->has_emb ? take(b, Nl * C * e) : NULL;
    a->bs.dln = nb > 0 || g->has_head ? takef(s, N * C) : NULL;
    /* the MLP's gradients: a dense block's, or an MoE block's shared experts' */
    size_t Fg = N * max_sz(g->has_dense ? F_l : 0, W_l), Hg = N * max_sz(g->has_dense ? H_l : 0, C_l);
    if (g->has_moe) Fg = max_sz(Fg, N * (size_t)g->d.Fs), Hg = max_sz(Hg, N * (size_t)g->d.Hs);
    a->bs.dA = nb > 0 ? takef(s, Fg) : NULL;
    a->bs.dB = nb > 0 ? takef(s, Hg) : NULL;
    /* an MoE block's backward (moe.c; its experts' rows' gradients are sized
     * by what arrives: moe_rows_grad_bytes), and its route's per-sample counts */
    int moe = g->has_moe;
    /* the rows it routes (take_block) */
    size_t E = (size_t)g->d.E, Nk = N * (size_t)g->d.k;
    a->bs.moe_dw = moe ? takef(b, Nk) : NULL;
    a->bs.moe_dlogits = moe ? takef(b, N * E) : NULL;
    a->bs.moe_aux = moe ? takef(b, (size_t)B * E) : NULL;
    a->bs.moe_chosen = moe ? takei(b, 2 * (size_t)B * E) : NULL;
    a->bs.moe_before = moe && g->cp ? takei(b, 2 * (size_t)B * E) : NULL;
    a->bs.moe_counts = moe ? takei(b, E) : NULL;
    size_t att_scr = att_scratch_numel(g, B);
    a->bs.att_scratch = nb > 0 && att_scr ? takef(s, att_scr) : NULL;
    /* sequence parallelism: the whole [N, C] for the blocks' gathers and partial
     * sums, the embedding's output before it is cut into rows, the ViT head's
     * class tokens (the GPT head gathers into lnf); layernorm gradients of the
     * blocks (4 x C) and of the GPT head (2 x C; the ViT head's layernorm sees
     * whole class-token rows) */
    a->bs.full = g->sp && (nb > 0 || g->has_emb || (g->has_head && !g->gpt)) ? takef(s, N * C) : NULL;
    a->bs.ln_grads = g->sp && (nb > 0 || (g->has_head && g->gpt)) ? takef(s, 4 * C) : NULL;
    layout_lora(g, B, a, s);
    if (g->gpt) {
        size_t V_l = (size_t)g->d.V_l;
        /* the chunked head (model_vocab_head): one chunk of logits, which its
         * backward also turns into their gradient in place; no [N, V_l] */
        a->logits = g->has_head ? takef(s, head_chunk_numel(g, B)) : NULL;
        a->dlogits = NULL;
        /* (train.lora: a frozen wte has no gradient to share) */
        a->tied_dwte = g->has_emb && g->has_head && g->tied && !g->lora ? takef(s, V_l * C) : NULL;
        /* (packed samples: wpe's rows by each row's position, no chunk copy) */
        a->wpe_l = g->has_emb && g->cp && !g->llama && !g->docs ? takef(s, (size_t)g->d.seq * C) : NULL;
        /* rotary positions: each local row's position in its sample (global
         * under context parallelism) and the cos / sin table of the sample's
         * positions, made when the working set is (model_acts_create);
         * packed samples have their own positions in every micro-batch's
         * stash (layout_stash) */
        if (!g->docs) a->bs.rope_pos = g->llama && nb > 0 ? takei(b, N) : NULL;
        a->bs.rope_cs = g->llama && nb > 0 ? takef(b, (size_t)model_seq_len(g->spec) * (size_t)g->d.hs) : NULL;
        /* kv heads replicated over tp: a micro-batch's qkv weight gradient and
         * every kv head's rows to sum it over the group (llama.c) */
        int apart = g->llama && nb > 0 && g->d.kv_replicas > 1;
        size_t kv_rows = 2 * (size_t)job_model_kv_heads(g->spec) * (size_t)g->d.hs;
        a->bs.kv_dw = apart ? takef(s, (size_t)g->d.W_l * C) : NULL;
        a->bs.kv_all = apart ? takef(s, kv_rows * C) : NULL;
    } else {
        size_t K = (size_t)g->spec->n_classes, Bs = (size_t)B;
        a->patch_out = g->has_emb ? takef(s, Bs * (size_t)g->d.NP * C) : NULL;
        a->cls_tmp = g->has_emb ? takef(s, Bs * C) : NULL;
        a->dcls_x = g->has_head ? takef(s, Bs * C) : NULL;
        a->dlogits = g->has_head ? takef(s, Bs * K) : NULL;
    }
}

/* A zero-bubble pipeline's W-pending tensors (block_wkeep): the four matmuls'
 * output gradients of every block, fp32. In fp32 most of them take the place of
 * a stash tensor that is dead once B has read it, the same size: d(fc out) that
 * of fc's output (read only by the GELU's backward), d(qkv) qkv's (read only by
 * the attention's backward), d(r2) r2's (read only by ln2's backward), and the
 * block's output gradient the block's output, which is the next block's input
 * (read by that block's B, earlier) or the head's (read by the head's B); only
 * the last block of a stage without the head needs its own [N, C] (its output
 * lives in the shared working set). So a micro-batch waiting for its W holds
 * little more than 1F1B's. bf16 stashes are 16-bit: there all four are extra.
 * With a: points a->wk into the stash and takes the rest from b; without,
 * sizes what it takes. */
static void layout_wkeep(const shape *g, int B, model_acts *a, bump *b)
{
    size_t N = (size_t)B * (size_t)g->d.seq, C = (size_t)g->d.C;
    for (int k = 0; k < g->nb; k++) {
        block_wkeep *w = a ? &a->wk[k] : &(block_wkeep){0};
        if (g->bf16) {
            w->dy = takef(b, N * C);
            w->dfch = takef(b, N * (size_t)g->d.H_l);
            w->dr2 = takef(b, N * C);
            w->dqkv = takef(b, N * (size_t)g->d.W_l);
            continue;
        }
        if (a) {
            w->dfch = a->blk[k].fch, w->dqkv = a->blk[k].qkv, w->dr2 = a->blk[k].r2;
            w->dy = k + 1 < g->nb ? (float *)a->stream + (size_t)(k + 1) * N * C : a->out;
        }
        if (k + 1 == g->nb && !g->has_head) w->dy = takef(b, N * C);
    }
}

size_t model_acts_wkeep_bytes(const job_model *spec, const model_shard *shard, int B, const model_precision *prec)
{
    shape g = shape_of(spec, shard, RECOMPUTE_NONE, prec);
    bump b = {.base = NULL};
    layout_wkeep(&g, B, NULL, &b);
    return b.off;
}

const char *model_split_unsupported(const model_shard *shard, recompute_kind recompute, const model_precision *prec)
{
    if (shard->sp && shard->tp_size > 1)
        return "sequence parallelism (the W pass would have to gather each layer's input rows again)";
    if (recompute == RECOMPUTE_BLOCK)
        return "recompute: block (the W pass would need each block's activations, rebuilt in B, a second time)";
    if (recompute == RECOMPUTE_ELEMENTWISE)
        return "recompute: elementwise (the W pass would need the norms' outputs, rebuilt in B, a second time)";
    return NULL;
}

model_acts *model_acts_create_split(model *m, int B)
{
    if (m->n_moe > 0) {
        fprintf(stderr, "dtrun: model: a split backward does not work with MoE blocks (their expert weight "
                        "gradients come with the input gradient)\n");
        return NULL;
    }
    const char *why = model_split_unsupported(&m->shard, m->recompute, &m->prec);
    if (why) {
        fprintf(stderr, "dtrun: model: a split backward does not work with %s\n", why);
        return NULL;
    }
    model_acts *a = model_acts_create(m, B);
    if (!a || m->n_blocks == 0) return a;
    shape g = shape_of(&m->spec, &m->shard, m->recompute, &m->prec);
    size_t bytes = model_acts_wkeep_bytes(&m->spec, &m->shard, B, &m->prec);
    a->wk = calloc((size_t)m->n_blocks, sizeof *a->wk);
    a->wk_mem = m->ops->alloc(bytes ? bytes : 1);
    if (!a->wk || !a->wk_mem) {
        fprintf(stderr, "dtrun: model: out of memory for %zu bytes of W-pending gradients\n", bytes);
        model_acts_destroy(a);
        return NULL;
    }
    bump b = {.base = a->wk_mem};
    layout_wkeep(&g, B, a, &b);
    return a;
}

model_acts_size model_acts_sizes(const job_model *spec, const model_shard *shard, int B,
                                 recompute_kind recompute, const model_precision *prec)
{
    shape g = shape_of(spec, shard, recompute, prec);
    model_acts sizing;
    memset(&sizing, 0, sizeof sizing);
    bump st = {.base = NULL}, wk = {.base = NULL}, sc = {.base = NULL}, ho = {.base = NULL};
    layout_work(&g, B, &sizing, &wk, &sc);
    layout_stash(&g, B, &sizing, &st);
    layout_host(&g, B, &sizing, &ho);
    return (model_acts_size){.stash = st.off, .work = wk.off + sc.off, .host = ho.off, .scratch = sc.off};
}

size_t model_acts_bytes(const job_model *spec, const model_shard *shard, int B,
                        recompute_kind recompute)
{
    model_acts_size z = model_acts_sizes(spec, shard, B, recompute, NULL);
    return z.stash + z.work;
}

/* ---- what follows the routing: an MoE block's experts' rows (moe.c) ----
 * Each piece of an allocation starts on ACTS_ALIGN, as in the layouts. */
size_t moe_rows_kept_bytes(const model_dims *d, size_t e, size_t rows)
{
    return acts_align(rows * (size_t)d->C * e) + acts_align(rows * (size_t)d->He * e) +
           acts_align(rows * (size_t)d->Fe * e);
}

size_t moe_rows_grad_bytes(const model_dims *d, size_t rows)
{
    return acts_align(rows * (size_t)d->C * sizeof(float)) + acts_align(rows * (size_t)d->Fe * sizeof(float)) +
           acts_align(rows * (size_t)d->He * sizeof(float));
}

size_t moe_rows_out_bytes(const model_dims *d, size_t e, size_t rows) { return acts_align(rows * (size_t)d->C * e); }

model_acts_size model_moe_rows_sizes(const job_model *spec, const model_shard *shard, int B,
                                     recompute_kind recompute, const model_precision *prec, size_t rows)
{
    shape g = shape_of(spec, shard, recompute, prec);
    model_acts_size z = {0};
    if (!g.has_moe) return z;
    size_t kept = moe_rows_kept_bytes(&g.d, g.e, rows), grads = moe_rows_grad_bytes(&g.d, rows);
    size_t out = g.d.ep_size > 1 ? moe_rows_out_bytes(&g.d, g.e, rows) : 0;
    (void)B;
    /* every MoE block a micro-batch keeps holds its rows until its backward;
     * under block recompute none does (a block's forward lets them go, its
     * second forward in the backward holds them again) */
    for (int k = 0; k < blk_sets(g.nb, g.rc); k++)
        if (block_mlp(&g, k) == MLP_MOE) z.stash += kept;
    /* one block at a time: its forward's outputs before they travel back,
     * then its backward's gradients (more: fp32, three tensors) */
    z.work = (g.rc == RECOMPUTE_BLOCK ? kept : 0) + (grads > out ? grads : out);
    return z;
}

size_t model_acts_head_chunk_bytes(const job_model *spec, const model_shard *shard, int B)
{
    shape g = shape_of(spec, shard, RECOMPUTE_NONE, NULL);
    if (!g.gpt || !g.has_head) return 0;
    bump b = {.base = NULL};
    takef(&b, head_chunk_numel(&g, B));
    return b.off;
}

size_t model_acts_host_bytes(const job_model *spec, int B)
{
    size_t N = (size_t)B * (size_t)model_seq_len(spec);
    size_t floats = 2 * N + (spec->kind == MODEL_VIT ? (size_t)B * (size_t)spec->n_classes : 0);
    size_t ints = spec->packed ? 2 * N : 0; /* packed samples: host_pos, host_seg */
    return floats * sizeof(float) + ints * sizeof(int);
}

/* Points every micro-batch's working-set pointers at the model's (again, after
 * it grew). */
static void point_work(model *m)
{
    shape g = shape_of(&m->spec, &m->shard, m->recompute, &m->prec);
    for (model_acts *x = m->acts_list; x; x = x->next) {
        bump b = {m->work_mem, 0, 0, 0}, s = {m->scr->mem, 0, 0, 0};
        layout_work(&g, m->work_B, x, &b, &s);
    }
    /* what the working set keeps for every micro-batch: a Llama's rotary
     * positions and table (the same memory for all of them) */
    if (m->acts_list && g.llama) llama_rope_prepare(m, &m->acts_list->bs, m->work_B);
    for (model_acts *x = m->acts_list; x; x = x->next) x->bs.moe_host = m->moe_host_scratch;
    /* a stash may point into the working set (selective recompute's shared
     * attention probabilities): lay the bound ones out again */
    for (model_acts *x = m->acts_list; x; x = x->next)
        if (x->mem) model_acts_bind_stash(x, x->mem);
}

static void scratch_release(model *m)
{
    if (m->scr && --m->scr->refs == 0) {
        m->ops->free(m->scr->mem);
        free(m->scr);
    }
    m->scr = NULL;
}

/* A scratch of at least `bytes` for m alone, unless it has one large enough
 * (a shared one too small is left to the others: m then has its own). */
static int scratch_reserve(model *m, size_t bytes)
{
    if (m->scr && m->scr->bytes >= bytes) return 0;
    struct model_scratch *x = calloc(1, sizeof *x);
    void *mem = x ? m->ops->alloc(bytes ? bytes : 1) : NULL;
    if (!mem) {
        free(x);
        fprintf(stderr, "dtrun: model: out of memory for %zu bytes of activation scratch\n", bytes);
        return -1;
    }
    scratch_release(m);
    *x = (struct model_scratch){mem, bytes, 1};
    m->scr = x;
    return 0;
}

void model_scratch_release(model *m) { scratch_release(m); }

int model_share_scratch(model *const *ms, int n)
{
    model *big = NULL;
    for (int i = 0; i < n; i++) {
        if (!ms[i]->scr) continue; /* no activations yet: nothing to share */
        if (big && ms[i]->ops != big->ops) return -1;
        if (!big || ms[i]->scr->bytes > big->scr->bytes) big = ms[i];
    }
    for (int i = 0; big && i < n; i++) {
        if (!ms[i]->scr || ms[i]->scr == big->scr) continue;
        scratch_release(ms[i]);
        ms[i]->scr = big->scr;
        big->scr->refs++;
        point_work(ms[i]);
    }
    return 0;
}

size_t model_acts_scratch_bytes(const model *m) { return m->scr ? m->scr->bytes : 0; }

/* The working set serves micro-batches of up to work_B samples: a larger one
 * makes it grow (the old one is freed; nothing in it outlives a compute call). */
static int work_reserve(model *m, int B)
{
    if (m->work_mem && m->work_B >= B) return 0;
    model_acts_size z = model_acts_sizes(&m->spec, &m->shard, B, m->recompute, &m->prec);
    size_t own = z.work - z.scratch;
    if (scratch_reserve(m, z.scratch)) return -1;
    void *mem = m->ops->alloc(own ? own : 1);
    if (!mem) {
        fprintf(stderr, "dtrun: model: out of memory for %zu bytes of activation working set\n", own);
        return -1;
    }
    /* an MoE route's per-sample sums, on their way to or from the host */
    float *host = NULL;
    if (m->n_moe > 0 && !(host = malloc((size_t)B * (size_t)m->d.E * sizeof(float)))) {
        m->ops->free(mem);
        fprintf(stderr, "dtrun: model: out of host memory for the MoE route's sums\n");
        return -1;
    }
    if (m->work_mem) m->ops->free(m->work_mem);
    free(m->moe_host_scratch);
    m->moe_host_scratch = host;
    m->work_mem = mem;
    m->work_bytes = own;
    m->work_B = B;
    return 0;
}

size_t model_acts_work_bytes(const model *m) { return m->work_mem ? m->work_bytes : 0; }

/* Each MoE block set's host arrays (block_acts moe_counts, moe_chosen): the
 * host launches the experts' GEMMs from the counts and computes the balance
 * loss from the per-sample choices. */
static int moe_host_arrays(model *m, model_acts *a)
{
    if (m->n_moe == 0) return 0;
    size_t E = (size_t)m->d.E, per = 3 * E + 2 * (size_t)a->B * E;
    int sets = blk_sets(m->n_blocks, m->recompute);
    a->moe_host = malloc((size_t)(sets + 1) * per * sizeof(int));
    a->moe_held = calloc((size_t)(sets + 1), sizeof(moe_held));
    if (!a->moe_host || !a->moe_held) return -1;
    for (int k = 0; k <= sets; k++) {
        block_acts *s = k < sets ? &a->blk[k] : &a->work_blk;
        if (k < sets && moe_slot_of(m, m->first_block + k) < 0) continue;
        s->moe_counts = a->moe_host + (size_t)k * per;
        s->moe_chosen = s->moe_counts + 3 * E;
        s->moe_rows = &a->moe_held[k];
    }
    return 0;
}

/* own_stash 0: the stash's memory comes later, from model_acts_bind_stash. */
static model_acts *acts_create(model *m, int B, int own_stash)
{
    if (B < 1) return NULL;
    model_acts *a = calloc(1, sizeof *a);
    if (!a) return NULL;
    a->m = m;
    a->B = B;
    shape g = shape_of(&m->spec, &m->shard, m->recompute, &m->prec);
    model_acts_size z = model_acts_sizes(&m->spec, &m->shard, B, m->recompute, &m->prec);
    a->bytes = z.stash;
    /* whole samples' rows, as model_acts_host_bytes counts them (context
     * parallelism uses its 1 / cp of them) */
    size_t N = (size_t)B * (size_t)model_seq_len(&m->spec);
    int sets = blk_sets(m->n_blocks, m->recompute);
    if (sets) a->blk = calloc((size_t)sets, sizeof(block_acts));
    if (own_stash) a->mem = m->ops->alloc(a->bytes ? a->bytes : 1);
    a->mem_borrowed = !own_stash;
    if (z.host) a->host_mem = m->ops->host_alloc(z.host);
    a->host_loss = malloc(N * sizeof(float));
    a->host_dloss = malloc(N * sizeof(float));
    if (m->spec.packed) a->host_pos = malloc(N * sizeof(int)), a->host_seg = malloc(N * sizeof(int));
    if (m->spec.kind == MODEL_VIT)
        a->host_logits = malloc((size_t)B * (size_t)m->spec.n_classes * sizeof(float));
    if ((own_stash && !a->mem) || (z.host && !a->host_mem) || (sets && !a->blk) || !a->host_loss || !a->host_dloss ||
        (m->spec.packed && (!a->host_pos || !a->host_seg)) ||
        (m->spec.kind == MODEL_VIT && !a->host_logits)) {
        fprintf(stderr, "dtrun: model: out of memory for %zu bytes of activations\n", a->bytes);
        model_acts_destroy(a);
        return NULL;
    }
    if (work_reserve(m, B)) {
        model_acts_destroy(a);
        return NULL;
    }
    a->next = m->acts_list;
    m->acts_list = a;
    point_work(m); /* this one's, and the others' when the set grew */
    bump hb = {.base = a->host_mem};
    model_acts_bind_stash(a, a->mem);
    layout_host(&g, B, a, &hb);
    if (moe_host_arrays(m, a) != 0) {
        fprintf(stderr, "dtrun: model: out of host memory for the MoE blocks' routes\n");
        model_acts_destroy(a);
        return NULL;
    }
    return a;
}

model_acts *model_acts_create(model *m, int B) { return acts_create(m, B, 1); }

model_acts *model_acts_create_unbound(model *m, int B) { return acts_create(m, B, 0); }

size_t model_acts_stash_bytes(const model *m, int B)
{
    return model_acts_sizes(&m->spec, &m->shard, B, m->recompute, &m->prec).stash;
}

void model_acts_bind_stash(model_acts *a, void *mem)
{
    model *m = a->m;
    shape g = shape_of(&m->spec, &m->shard, m->recompute, &m->prec);
    if (a->mem_borrowed) a->mem = mem;
    bump b = {a->mem, 0, 0, 0};
    layout_stash(&g, a->B, a, &b);
    a->kept_attn_in = b.attn_in;
    a->kept_mlp_in = b.mlp_in;
}

void model_acts_kept(const model_acts *a, size_t *attn_in, size_t *mlp_in)
{
    *attn_in = a->kept_attn_in;
    *mlp_in = a->kept_mlp_in;
}

void model_acts_destroy(model_acts *a)
{
    if (!a) return;
    model *m = a->m;
    for (model_acts **p = &m->acts_list; *p; p = &(*p)->next)
        if (*p == a) {
            *p = a->next;
            break;
        }
    /* the experts' rows a block still holds (a forward without its backward) */
    for (int k = 0; a->moe_held && k <= blk_sets(m->n_blocks, m->recompute); k++) moe_release(m, &a->moe_held[k]);
    free(a->moe_held);
    if (a->mem && !a->mem_borrowed) m->ops->free(a->mem);
    if (a->host_mem) m->ops->host_free(a->host_mem);
    if (a->wk_mem) m->ops->free(a->wk_mem);
    free(a->wk);
    free(a->moe_host);
    free(a->blk);
    free(a->host_loss);
    free(a->host_dloss);
    free(a->host_logits);
    free(a->host_pos);
    free(a->host_seg);
    free(a);
}

/* The stream entering the shard: entry 0 of the stash, or, on a shard of only
 * the embedding (it has no input), its output. */
void *model_acts_input(model_acts *a)
{
    if (a->m->n_blocks == 0 && !a->m->has_head) return model_acts_output(a);
    return a->stream;
}

void *model_acts_output(model_acts *a) { return a->out; }

void *model_acts_dinput(model_acts *a) { return a->dinput ? a->dinput : (void *)a->dres; }
void *model_acts_doutput(model_acts *a) { return a->doutput; }

size_t model_acts_io_elem_size(const model *m) { return dt_dtype_size(m->act); }

size_t model_acts_io_numel(const model *m, int B)
{
    return (size_t)rows_local(&m->d, B) * (size_t)m->d.C;
}
