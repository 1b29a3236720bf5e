/* sizes.c — per-category memory of a worker (see sizes.h for the contract).
 *
 * Everything derives from three model facts: model_unit_numel (parameters per unit
 * and tp rank), model_acts_bytes (one micro-batch's activations on a shard) and the
 * FLOP terms of model_flops_per_sample (for the stage split); plus comm_chunk (how
 * a sharded unit is split) and the pipeline schedule (how many micro-batches are
 * alive at once). */
#include "runtime/parallel/sizes.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/util/intmath.h"
#include "runtime/comm/comm.h"
#include "runtime/model/model.h"
#include "runtime/optim/optim.h"
#include "runtime/parallel/pp_partition.h"

#define MIB ((size_t)1 << 20)

/* The stage split and the schedule, shared (reference counted) between sizes
 * objects of jobs that agree on what they depend on: a search over thousands of
 * layouts rebuilds them only when pp, virtual stages, recompute (the split) or
 * the schedule and microbatches change. */
typedef struct {
    int refs;
    job_model model;
    int pp, v;
    recompute_kind rc;
    int *first_unit; /* [pp * v + 1] */
} shared_split;

typedef struct {
    int refs;
    pp_schedule_kind kind;
    int pp, m, v;
    int built;            /* the lists exist (not for the planner's memory pass) */
    pp_schedule schedule; /* validated once when built: see sizes_schedule */
    int *slots;           /* [pp * v] peak in-flight micro-batches per chunk */
    int *rank_slots;      /* [pp] of all a rank's chunks together */
} shared_schedule;

struct sizes {
    job_spec job;
    sizes_env env;
    int mixed;
    int chunks;
    shared_split *split;
    shared_schedule *sched; /* NULL when pp = 1 */
    const int *first_unit;  /* split->first_unit */
    int hsdp_group;
    int ep, edp;            /* parallel.ep (1: none) and the experts' data-parallel group, dp x cp / ep */
    /* numel of the embedding, of any dense block (they all have the same
     * shapes), of any MoE block (model.moe; likewise) and of the head, per tp
     * rank: model_unit_numel formats parameter names, too slow to call per unit
     * inside the planner's search */
    size_t *numel_emb, *numel_block, *numel_moe, *numel_head; /* [tp] */
    /* [tp]: train.lora's frozen base (a LoRA model's blocks are all dense) */
    size_t *frozen_emb, *frozen_block, *frozen_head;
    size_t *numel_exp; /* [tp] an MoE block's routed experts, all E (model_unit_expert_numel) */
};

double sizes_unit_flops(const job_model *m, int unit, recompute_kind rc)
{
    double f = model_unit_flops(m, unit, rc);
    /* the chunked LM head computes its logits again in backward: 2 more */
    if (unit == m->n_layer + 1 && job_model_is_lm(m)) f += 2.0 * m->vocab_size * (double)m->d_model * model_seq_len(m);
    return f;
}

/* wf: of bwd, the weight-gradient GEMM a zero-bubble W pass runs (sizes_gemm). */
static sizes_gemm *add_gemm(sizes_unit_work *w, double fwd, double bwd, double dim, double wf)
{
    if (w->n_gemm == SIZES_GEMM_MAX || fwd + bwd <= 0) return NULL;
    w->gemm[w->n_gemm] = (sizes_gemm){fwd, bwd, dim < 1 ? 1 : dim, wf, 0, 0};
    return &w->gemm[w->n_gemm++];
}

/* The attention core: its products over `keys` keys per call. */
static void add_attention(sizes_unit_work *w, double fwd, double bwd, double dim, double keys)
{
    sizes_gemm *g = add_gemm(w, fwd, bwd, dim, 0);
    if (g) g->attention = 1, g->keys = keys;
}

static double min3(double a, double b, double c)
{
    double m = a < b ? a : b;
    return m < c ? m : c;
}

/* The terms of sizes_unit_flops, GEMM by GEMM. A block's four linear layers
 * (qkv C -> 3C and fc1 C -> F column-parallel, proj C -> C and fc2 F -> C
 * row-parallel: forward 2 x rows x in x out, backward twice that) and its
 * attention core (QK^T and AV per head: 4 x seq^2 x C forward, their smallest
 * dimension the head size); block recompute re-runs qkv, proj, fc1 and the core
 * (fc2's input is kept), selective recompute the core only (with naive
 * attention: the fused kind and context parallelism keep no probabilities, so
 * there is nothing to redo). Memory-bound bytes: per forward, the norms and
 * residual adds read and write 10 [rows, C] tensors (replicated over tp unless
 * sequence parallel), the attention's head split and merge 8 [rows, C/tp],
 * GELU 2 [rows, F/tp], the naive attention's softmax 2 [heads/tp, seq, seq]
 * per sample (a blockwise kernel, fused or the ring's, keeps a tile of scores
 * on chip and writes none); backward moves twice what forward does (the saved
 * input and the incoming gradient in, the gradient out). */
void sizes_unit_work_of(const job_model *m, int unit, recompute_kind rc, int micro_batch, int tp, int sp,
                        double elem_bytes, sizes_unit_work *w)
{
    sizes_unit_work_cp(m, unit, rc, micro_batch, tp, sp, 1, elem_bytes, w);
}

void sizes_unit_work_cp(const job_model *m, int unit, recompute_kind rc, int micro_batch, int tp, int sp, int cp,
                        double elem_bytes, sizes_unit_work *w)
{
    sizes_unit_work_ep(m, unit, rc, micro_batch, tp, sp, cp, 1, elem_bytes, w);
}

/* The rows one tp rank routes: all of its micro-batch's, gathered under
 * sequence parallelism (moe.c: every tp rank routes them alike and computes
 * its 1/tp of every expert's columns). */
static double moe_rows(const job_model *m, int micro_batch, int tp, int sp, int cp)
{
    (void)tp, (void)sp;
    return (double)micro_batch * model_seq_len(m) / (cp > 1 ? cp : 1);
}

/* The choices that reach an expert, per routed row: top_k, or (capacity)
 * capacity_factor x top_k when that is less (the even load fills every
 * expert's capacity at factor 1). */
static double moe_choices_per_row(const job_moe *e)
{
    double k = e->top_k;
    return e->capacity_factor > 0 && e->capacity_factor < 1 ? k * e->capacity_factor : k;
}

double sizes_moe_routed_rows(const job_model *m, int micro_batch, int tp, int sp, int cp)
{
    if (m->moe.experts < 1) return 0;
    return moe_rows(m, micro_batch, tp, sp, cp) * moe_choices_per_row(&m->moe);
}

/* An MoE block's MLP (sizes.h sizes_unit_work_ep), in two parts around the
 * attention core (sizes.h's order): the routed experts' grouped GEMMs, then
 * the router and the shared experts; block recompute re-runs all but the
 * shared experts' second GEMM (model_unit_flops' count). Returns the rows
 * the experts compute. */
static double moe_work(const job_model *m, int micro_batch, int tp, int sp, int cp, int ep, double blk,
                       sizes_unit_work *w)
{
    const job_moe *e = &m->moe;
    double C = m->d_model, E = e->experts, glu = m->kind == MODEL_LLAMA ? 2.0 : 1.0;
    double Fe = (double)e->d_ff_expert / tp, He = glu * Fe; /* this tp rank's columns */
    double rows = moe_rows(m, micro_batch, tp, sp, cp), routed = rows * moe_choices_per_row(e);
    double per_expert = routed * (ep > 1 ? ep : 1) / E; /* a local expert's rows */
    double up = 2.0 * routed * C * He, down = 2.0 * routed * Fe * C;
    add_gemm(w, up, (2.0 + blk) * up, min3(per_expert, C, He), up);
    add_gemm(w, down, (2.0 + blk) * down, min3(per_expert, Fe, C), down);
    return routed;
}

static void moe_work_tail(const job_model *m, double rows, int tp, double blk, sizes_unit_work *w)
{
    const job_moe *e = &m->moe;
    double C = m->d_model, E = e->experts, glu = m->kind == MODEL_LLAMA ? 2.0 : 1.0;
    /* the router whole on every tp rank; the shared experts' columns split */
    double Fs = (double)e->shared_experts * e->d_ff_expert / tp, Hs = glu * Fs;
    double router = 2.0 * rows * C * E;
    add_gemm(w, router, (2.0 + blk) * router, min3(rows, C, E), router);
    if (Fs > 0) {
        double sup = 2.0 * rows * C * Hs, sdown = 2.0 * rows * Fs * C;
        add_gemm(w, sup, (2.0 + blk) * sup, min3(rows, C, Hs), sup);
        add_gemm(w, sdown, 2.0 * sdown, min3(rows, Fs, C), sdown);
    }
}

void sizes_unit_work_ep(const job_model *m, int unit, recompute_kind rc, int micro_batch, int tp, int sp, int cp,
                        int ep, double elem_bytes, sizes_unit_work *w)
{
    memset(w, 0, sizeof *w);
    double C = m->d_model, F = m->d_ff, seq = model_seq_len(m), B = micro_batch, t = tp;
    if (cp < 1) cp = 1;
    /* context parallelism: this rank's tokens; its share of the causal attention
     * is 1/cp of the whole (load balanced), in blocks of seq / (2 cp) keys.
     * There and with fused attention nothing is left for selective recompute
     * to redo (no probabilities kept) */
    int lse = model_attention_lse(m, cp);
    if (lse && rc == RECOMPUTE_SELECTIVE) rc = RECOMPUTE_NONE;
    double rows = B * seq / cp, att_share = 1.0 / cp, kblock = cp > 1 ? seq / (2.0 * cp) : seq;
    int L = m->n_layer;
    if (unit == 0) {
        if (job_model_is_lm(m)) { /* a lookup: read the rows, write them */
            w->fwd_bytes = 2.0 * rows * C / (sp ? t : 1) * elem_bytes;
            w->bwd_bytes = 2.0 * w->fwd_bytes;
            return;
        }
        double kin = (double)m->channels * m->patch_size * m->patch_size, f = 2.0 * B * (seq - 1) * kin * C / t;
        add_gemm(w, f, 2.0 * f, min3(B * (seq - 1), kin, C / t), 0);
        return;
    }
    if (unit <= L) {
        /* Llama: q, k, v out of one GEMM (k and v of this rank's kv heads:
         * 1/t of them, or the one a rank replicates above n_kv_head), the
         * SwiGLU's gate and up out of one (2F), RoPE on q and k, the SwiGLU
         * reading 2F and writing F */
        int llama = m->kind == MODEL_LLAMA;
        double hd = C / (m->n_head > 0 ? m->n_head : 1), kvh = job_model_kv_heads(m);
        double kv_l = llama ? (kvh >= t ? kvh / t : 1.0) * hd : C / t, h1 = llama ? 2.0 * F : F;
        double blk = rc == RECOMPUTE_BLOCK ? 1.0 : 0.0;
        double qkv_l = C / t + 2.0 * kv_l;
        double qkv = 2.0 * rows * C * qkv_l, proj = 2.0 * rows * C * C / t;
        double fc1 = 2.0 * rows * C * h1 / t, fc2 = 2.0 * rows * F * C / t;
        double core = 4.0 * B * seq * seq * model_attention_width(m) / t * att_share;
        int moe = job_moe_block(m, unit - 1);
        double qkv_dim = min3(rows, C, qkv_l), proj_dim = min3(rows, C / t, C);
        if (job_model_mla(m)) {
            /* multi-head latent attention (--dry-run only): its projections
             * as one GEMM of their weights (the latents bound its shape),
             * split over tp like the heads; the output projection's input is
             * n_head x v_head_dim wide */
            double in, out, lat = m->mla.kv_lora_rank;
            model_mla_weights(m, &in, &out);
            qkv = 2.0 * rows * in / t, proj = 2.0 * rows * out / t;
            qkv_dim = min3(rows, C, lat), proj_dim = min3(rows, out / C / t, C);
            hd = m->mla.qk_nope_head_dim + m->mla.qk_rope_head_dim;
        }
        /* train.lora: the frozen weights' backward is their input gradient
         * alone (no W pass); the adapters one GEMM of rank-wide products */
        double wg = job_lora_on(m) ? 0.0 : 1.0;
        add_gemm(w, qkv, (1.0 + wg + blk) * qkv, qkv_dim, wg * qkv);
        add_gemm(w, proj, (1.0 + wg + blk) * proj, proj_dim, wg * proj);
        double routed = 0, mrows = moe ? moe_rows(m, micro_batch, tp, sp, cp) : 0;
        if (moe) {
            routed = moe_work(m, micro_batch, tp, sp, cp, ep, blk, w);
        } else {
            add_gemm(w, fc1, (1.0 + wg + blk) * fc1, min3(rows, C, h1 / t), wg * fc1);
            add_gemm(w, fc2, (1.0 + wg) * fc2, min3(rows, F / t, C), wg * fc2);
        }
        /* block and selective recompute run the attention core again;
         * elementwise recompute does not */
        int att_again = rc == RECOMPUTE_BLOCK || rc == RECOMPUTE_SELECTIVE;
        add_attention(w, core, (2.0 + (att_again ? 1.0 : 0.0)) * core, hd < kblock ? hd : kblock, kblock);
        if (moe) moe_work_tail(m, mrows, tp, blk, w);
        if (job_lora_on(m)) {
            double af, aa, ar;
            lora_block_flops(m, (int)t, rows, &af, &aa, &ar);
            add_gemm(w, af, 2.0 * af + aa + blk * ar, min3(rows, m->lora.rank, C), 0);
        }
        double heads = (double)m->n_head / t;
        double mlp_act = llama ? 3.0 * rows * F / t : 2.0 * rows * F / t;
        if (moe) {
            /* the experts' and the shared experts' activation; the routed rows
             * copied out by the dispatch and back by the combine (read and
             * write each); the router's fp32 scores, their softmax and top-k */
            double Fe = m->moe.d_ff_expert / t, Fs = (double)m->moe.shared_experts * m->moe.d_ff_expert / t;
            mlp_act = (llama ? 3.0 : 2.0) * (routed * Fe + mrows * Fs) + 4.0 * routed * C +
                      3.0 * mrows * m->moe.experts * 4.0 / elem_bytes;
        }
        double act = mlp_act + (llama ? 2.0 * rows * (C / t + kv_l) : 0.0);
        double rep = 10.0 * rows * C / (sp ? t : 1), split = 8.0 * rows * C / t + act;
        double soft = lse ? 0.0 : 2.0 * heads * B * seq * seq * att_share;
        w->fwd_bytes = (rep + split + soft) * elem_bytes;
        /* elementwise recompute: the two norms again (read their input, write
         * their output) and a dense Llama block's SwiGLU (read gate|up, write
         * the product) */
        double el = 4.0 * rows * C / (sp ? t : 1) + (llama && !moe ? 3.0 * rows * F / t : 0.0);
        w->bwd_bytes = 2.0 * w->fwd_bytes + (rc == RECOMPUTE_BLOCK ? w->fwd_bytes
                                             : rc == RECOMPUTE_SELECTIVE ? soft * elem_bytes
                                             : rc == RECOMPUTE_ELEMENTWISE ? el * elem_bytes : 0.0);
        return;
    }
    if (job_model_is_lm(m)) { /* final norm + vocab-parallel head with its cross-entropy */
        /* chunked (model_vocab_head): backward computes the logits again (f),
         * then their input and weight gradients (2 f), and writes the
         * recomputed logits once more (rows x V / t) */
        double V = m->vocab_size, f = 2.0 * rows * C * V / t;
        add_gemm(w, f, (job_lora_on(m) ? 2.0 : 3.0) * f, min3(rows, C, V / t), 0); /* train.lora: no d(wte) */
        w->fwd_bytes = (2.0 * rows * C / (sp ? t : 1) + 2.0 * rows * V / t) * elem_bytes;
        w->bwd_bytes = 2.0 * w->fwd_bytes + rows * V / t * elem_bytes;
        return;
    }
    double f = 2.0 * B * C * m->n_classes;
    add_gemm(w, f, 2.0 * f, min3(B, C, m->n_classes), 0);
}

size_t sizes_model_numel(const job_model *m, size_t *distinct)
{
    int L = m->n_layer;
    size_t total = model_unit_numel(m, 0, 0, 1) + model_unit_numel(m, L + 1, 0, 1);
    int moe = job_moe_layers(m), first_moe = 0;
    while (moe > 0 && !job_moe_block(m, first_moe)) first_moe++;
    int first_dense = 0;
    while (first_dense < L && job_moe_block(m, first_dense)) first_dense++;
    if (moe > 0) total += (size_t)moe * model_unit_numel(m, first_moe + 1, 0, 1);
    if (L > moe) total += (size_t)(L - moe) * model_unit_numel(m, first_dense + 1, 0, 1);
    size_t frozen = sizes_model_frozen_numel(m);
    total += frozen;
    if (distinct)
        *distinct = total - (job_model_tied_head(m) ? (size_t)m->vocab_size * (size_t)m->d_model : 0);
    return total;
}

size_t sizes_model_frozen_numel(const job_model *m)
{
    int L = m->n_layer;
    return model_unit_frozen_numel(m, 0, 0, 1) + (size_t)L * model_unit_frozen_numel(m, 1, 0, 1) +
           model_unit_frozen_numel(m, L + 1, 0, 1);
}

size_t sizes_model_active_numel(const job_model *m)
{
    size_t distinct;
    sizes_model_numel(m, &distinct);
    int moe = job_moe_layers(m), first_moe = 0;
    if (moe == 0) return distinct;
    while (!job_moe_block(m, first_moe)) first_moe++;
    /* of every MoE block's E experts, E - top_k stay idle for a token */
    size_t experts = model_unit_expert_numel(m, first_moe + 1, 0, 1), E = (size_t)m->moe.experts;
    return distinct - (size_t)moe * (experts / E) * (E - (size_t)m->moe.top_k);
}

static void split_release(shared_split *sp)
{
    if (sp && --sp->refs == 0) {
        free(sp->first_unit);
        free(sp);
    }
}

static void schedule_release(shared_schedule *sc)
{
    if (sc && --sc->refs == 0) {
        pp_schedule_free(&sc->schedule);
        free(sc->slots);
        free(sc->rank_slots);
        free(sc);
    }
}

static shared_split *split_get(const job_spec *job, const sizes *donor, char *err, size_t errlen)
{
    const job_parallel *par = &job->parallel;
    shared_split *d = donor ? donor->split : NULL;
    if (d && d->pp == par->pp && d->v == par->virtual_stages && d->rc == job->train.recompute &&
        memcmp(&d->model, &job->model, sizeof d->model) == 0) {
        d->refs++;
        return d;
    }
    int n_units = model_n_units(&job->model);
    shared_split *sp = calloc(1, sizeof *sp);
    double *cost = malloc((size_t)n_units * sizeof(double));
    if (sp) sp->first_unit = malloc((size_t)(par->pp * par->virtual_stages + 1) * sizeof(int));
    if (!sp || !cost || !sp->first_unit) {
        if (sp) free(sp->first_unit);
        free(sp), free(cost);
        snprintf(err, errlen, "sizes: out of memory");
        return NULL;
    }
    *sp = (shared_split){1, job->model, par->pp, par->virtual_stages, job->train.recompute, sp->first_unit};
    for (int u = 0; u < n_units; u++) cost[u] = sizes_unit_flops(&job->model, u, job->train.recompute);
    int rc = pp_partition(cost, n_units, par->pp, par->virtual_stages, sp->first_unit, err, errlen);
    free(cost);
    if (rc) {
        split_release(sp);
        return NULL;
    }
    return sp;
}

/* Builds and validates the lists into sc (once: shared by every layout with the
 * same kind, pp, m and v — the planner simulates one schedule under many costs). */
static int schedule_build_lists(shared_schedule *sc, char *err, size_t errlen)
{
    if (sc->built) return 0;
    if (pp_schedule_build(&sc->schedule, sc->kind, sc->pp, sc->m, sc->v, err, errlen) ||
        pp_schedule_validate(&sc->schedule, err, errlen)) {
        pp_schedule_free(&sc->schedule);
        return -1;
    }
    sc->built = 1;
    return 0;
}

static shared_schedule *schedule_get(const job_spec *job, const sizes *donor, int lists, char *err, size_t errlen)
{
    const job_parallel *par = &job->parallel;
    shared_schedule *d = donor ? donor->sched : NULL;
    if (d && d->kind == par->pp_schedule && d->pp == par->pp && d->m == par->microbatches &&
        d->v == par->virtual_stages) {
        if (lists && schedule_build_lists(d, err, errlen)) return NULL;
        d->refs++;
        return d;
    }
    shared_schedule *sc = calloc(1, sizeof *sc);
    int *slots = malloc((size_t)(par->pp * par->virtual_stages) * sizeof *slots);
    int *rank_slots = malloc((size_t)par->pp * sizeof *rank_slots);
    if (!sc || !slots || !rank_slots) {
        free(sc), free(slots), free(rank_slots);
        snprintf(err, errlen, "sizes: out of memory");
        return NULL;
    }
    *sc = (shared_schedule){.refs = 1, .kind = par->pp_schedule, .pp = par->pp, .m = par->microbatches,
                            .v = par->virtual_stages, .slots = slots, .rank_slots = rank_slots};
    /* the activation slots come from the generator itself, lists or not */
    if (pp_schedule_peak_in_flight_chunks(sc->kind, sc->pp, sc->m, sc->v, sc->slots, sc->rank_slots, err,
                                          errlen) ||
        (lists && schedule_build_lists(sc, err, errlen))) {
        schedule_release(sc);
        return NULL;
    }
    return sc;
}

sizes *sizes_create_reusing(const job_spec *job, const sizes_env *env, const sizes *donor, char *err,
                            size_t errlen)
{
    const job_parallel *par = &job->parallel;
    sizes *s = calloc(1, sizeof *s);
    if (!s) {
        snprintf(err, errlen, "sizes: out of memory");
        return NULL;
    }
    s->job = *job;
    s->env = *env;
    /* bf16 working copies + fp32 master wherever the job trains in bf16 (the CPU
     * backend computes in bf16 too) */
    s->mixed = job->train.precision == PREC_BF16;
    s->chunks = par->pp * par->virtual_stages;
    int tp = par->tp, n_units = model_n_units(&job->model);
    s->numel_emb = malloc((size_t)tp * sizeof(size_t));
    s->numel_block = malloc((size_t)tp * sizeof(size_t));
    s->numel_moe = malloc((size_t)tp * sizeof(size_t));
    s->numel_head = malloc((size_t)tp * sizeof(size_t));
    s->frozen_emb = malloc((size_t)tp * sizeof(size_t));
    s->frozen_block = malloc((size_t)tp * sizeof(size_t));
    s->frozen_head = malloc((size_t)tp * sizeof(size_t));
    s->numel_exp = malloc((size_t)tp * sizeof(size_t));
    if (!s->numel_emb || !s->numel_block || !s->numel_moe || !s->numel_head || !s->frozen_emb || !s->frozen_block ||
        !s->frozen_head || !s->numel_exp) {
        sizes_destroy(s);
        snprintf(err, errlen, "sizes: out of memory");
        return NULL;
    }
    s->split = split_get(job, donor, err, errlen);
    if (!s->split) {
        sizes_destroy(s);
        return NULL;
    }
    s->first_unit = s->split->first_unit;
    if (par->pp > 1 && !(s->sched = schedule_get(job, donor, !env->slots_only, err, errlen))) {
        sizes_destroy(s);
        return NULL;
    }
    /* the donor's numel tables hold when the model and tp agree */
    int ep = par->ep > 1 ? par->ep : 1; /* an MoE block holds experts / ep of its experts */
    int same_numel = donor && donor->job.parallel.tp == tp && donor->job.parallel.ep == par->ep &&
                     memcmp(&donor->job.model, &job->model, sizeof job->model) == 0;
    /* a dense block's and an MoE block's units (model.moe): the first of each kind */
    int dense_unit = 1, moe_unit = 1, L = job->model.n_layer;
    while (dense_unit <= L && job_moe_block(&job->model, dense_unit - 1)) dense_unit++;
    while (moe_unit <= L && !job_moe_block(&job->model, moe_unit - 1)) moe_unit++;
    for (int r = 0; r < tp; r++) {
        s->numel_emb[r] = same_numel ? donor->numel_emb[r] : model_unit_numel(&job->model, 0, r, tp);
        s->numel_block[r] = same_numel            ? donor->numel_block[r]
                            : dense_unit <= L ? model_unit_numel(&job->model, dense_unit, r, tp)
                                              : 0;
        s->numel_moe[r] = same_numel        ? donor->numel_moe[r]
                          : moe_unit <= L ? model_unit_numel_ep(&job->model, moe_unit, r, tp, ep)
                                          : 0;
        s->numel_head[r] = same_numel ? donor->numel_head[r] : model_unit_numel(&job->model, n_units - 1, r, tp);
        s->frozen_emb[r] = same_numel ? donor->frozen_emb[r] : model_unit_frozen_numel(&job->model, 0, r, tp);
        s->frozen_block[r] = same_numel ? donor->frozen_block[r] : model_unit_frozen_numel(&job->model, 1, r, tp);
        s->frozen_head[r] =
            same_numel ? donor->frozen_head[r] : model_unit_frozen_numel(&job->model, n_units - 1, r, tp);
        s->numel_exp[r] = same_numel        ? donor->numel_exp[r]
                          : moe_unit <= L ? model_unit_expert_numel(&job->model, moe_unit, r, tp)
                                          : 0;
    }
    int per_node = env->ranks_per_node >= 1 ? env->ranks_per_node : par->dp * par->pp * tp;
    /* the gradient group's (dp x cp) positions one node holds: tp varies
     * fastest, then cp, then dp, so they are consecutive */
    int dp_in_node = per_node / tp > 0 ? per_node / tp : 1;
    s->hsdp_group = (int)gcd_l((long)par->dp * par->cp, dp_in_node);
    /* the experts' data-parallel group: every ep-th position of dp x cp
     * (mesh.h), so a node's run of hsdp_group positions holds hsdp_group /
     * ep of them when ep divides it */
    s->ep = par->ep > 1 ? par->ep : 1;
    s->edp = par->dp * par->cp / s->ep;
    return s;
}

sizes *sizes_create(const job_spec *job, const sizes_env *env, char *err, size_t errlen)
{
    return sizes_create_reusing(job, env, NULL, err, errlen);
}

void sizes_destroy(sizes *s)
{
    if (!s) return;
    split_release(s->split);
    schedule_release(s->sched);
    free(s->numel_emb);
    free(s->numel_block);
    free(s->numel_moe);
    free(s->numel_head);
    free(s->frozen_emb);
    free(s->frozen_block);
    free(s->frozen_head);
    free(s->numel_exp);
    free(s);
}

const job_spec *sizes_job(const sizes *s) { return &s->job; }
int sizes_mixed(const sizes *s) { return s->mixed; }
size_t sizes_param_elem_bytes(const sizes *s) { return s->mixed ? 2 : 4; }
/* fp32 training keeps and reduces fp32 gradients (job_validate refuses bf16 of
 * either there); under bf16 the gradients are bf16 unless train.grad_dtype says
 * fp32 (Megatron's fp32 main grads), and the collectives carry
 * parallel.reduce_dtype (auto: what the gradients are). */
size_t sizes_grad_elem_bytes(const sizes *s)
{
    return s->mixed && s->job.train.grad_dtype != DTYPE_FP32 ? 2 : 4;
}

size_t sizes_reduce_elem_bytes(const sizes *s)
{
    dtype_kind r = s->job.parallel.reduce_dtype;
    if (!s->mixed || r == DTYPE_FP32) return 4;
    return r == DTYPE_BF16 ? 2 : sizes_grad_elem_bytes(s);
}
int sizes_chunks(const sizes *s) { return s->chunks; }
const int *sizes_first_unit(const sizes *s) { return s->first_unit; }
const pp_schedule *sizes_schedule(const sizes *s) { return s->sched && s->sched->built ? &s->sched->schedule : NULL; }

size_t sizes_unit_numel(const sizes *s, int unit, int tp_rank)
{
    if (unit == 0) return s->numel_emb[tp_rank];
    if (unit <= s->job.model.n_layer)
        return job_moe_block(&s->job.model, unit - 1) ? s->numel_moe[tp_rank] : s->numel_block[tp_rank];
    return s->numel_head[tp_rank];
}

size_t sizes_unit_frozen_numel(const sizes *s, int unit, int tp_rank)
{
    if (unit == 0) return s->frozen_emb[tp_rank];
    if (unit <= s->job.model.n_layer) return s->frozen_block[tp_rank];
    return s->frozen_head[tp_rank];
}

size_t sizes_unit_expert_numel(const sizes *s, int unit, int tp_rank)
{
    if (unit < 1 || unit > s->job.model.n_layer || !job_moe_block(&s->job.model, unit - 1)) return 0;
    return s->numel_exp[tp_rank] / (size_t)s->ep;
}

int sizes_expert_dp(const sizes *s) { return s->edp; }

int sizes_grad_dp(const sizes *s) { return s->job.parallel.dp * s->job.parallel.cp; }

int sizes_shard_group(const sizes *s, sizes_shard_of what)
{
    shard_mode mode = s->job.parallel.mode;
    int dp = sizes_grad_dp(s);
    if (mode == SHARD_HSDP) return s->hsdp_group;
    switch (what) {
    case SHARD_OF_PARAM: return mode == SHARD_FSDP ? dp : 1;
    case SHARD_OF_GRAD: return mode == SHARD_FSDP || mode == SHARD_ZERO2 ? dp : 1;
    default: return mode == SHARD_NONE ? 1 : dp;
    }
}

/* HSDP's shard groups are runs of consecutive ranks of the gradient group (dp,
 * or dp x cp), which sit in one node because tp varies fastest, then cp, then
 * dp in the mesh. */
int sizes_shard_rank(const sizes *s, sizes_shard_of what, int dp_rank)
{
    return dp_rank % sizes_shard_group(s, what);
}

int sizes_ep(const sizes *s) { return s->job.parallel.ep > 1 ? s->job.parallel.ep : 1; }

int sizes_expert_unit(const sizes *s, int unit)
{
    return sizes_ep(s) > 1 && unit >= 1 && unit <= s->job.model.n_layer && job_moe_block(&s->job.model, unit - 1);
}

size_t sizes_shard(const sizes *s, sizes_shard_of what, int unit, sizes_at at, size_t *lo)
{
    size_t n = sizes_unit_numel(s, unit, at.tp), off, len;
    int S = sizes_shard_group(s, what), r = sizes_shard_rank(s, what, at.dp), ep = sizes_ep(s);
    /* an expert unit: over the experts' data-parallel group (mesh.h MESH_EDP:
     * place at.dp of dp x cp is its rank at.dp / ep), the whole of it under
     * HSDP too (its ranks hold other experts than the node's dense shard
     * group: the expert units shard as FSDP's, the rest is hybrid) */
    if (S > 1 && sizes_expert_unit(s, unit)) {
        if (s->job.parallel.mode == SHARD_HSDP) S = sizes_grad_dp(s);
        S /= ep, r = at.dp / ep;
    }
    comm_chunk(n, S, r, &off, &len);
    if (lo) *lo = off;
    return len;
}

size_t sizes_frozen_shard(const sizes *s, int unit, sizes_at at, size_t *lo)
{
    size_t n = sizes_unit_frozen_numel(s, unit, at.tp), off, len;
    comm_chunk(n, sizes_shard_group(s, SHARD_OF_PARAM), sizes_shard_rank(s, SHARD_OF_PARAM, at.dp), &off, &len);
    if (lo) *lo = off;
    return len;
}

static int seq_parallel(const sizes *s)
{
    return s->job.parallel.sequence_parallel && s->job.parallel.tp > 1;
}

/* The rows one rank routes per micro-batch (acts.c: all of the
 * micro-batch's, gathered under sequence parallelism: every tp rank routes
 * them alike), and its experts. */
static size_t moe_rank_rows(const sizes *s)
{
    const job_spec *j = &s->job;
    return (size_t)j->train.micro_batch * (size_t)(model_seq_len(&j->model) / j->parallel.cp);
}

size_t sizes_moe_worst_rows(const sizes *s)
{
    const job_moe *e = &s->job.model.moe;
    if (e->experts < 1) return 0;
    int ep = sizes_ep(s), El = e->experts / ep, k = e->top_k < El ? e->top_k : El;
    return moe_rank_rows(s) * (size_t)k * (size_t)ep; /* each token's top_k on at most El experts here, from every ep rank */
}

size_t sizes_moe_even_rows(const sizes *s)
{
    const job_moe *e = &s->job.model.moe;
    return e->experts < 1 ? 0 : moe_rank_rows(s) * (size_t)e->top_k;
}

size_t sizes_moe_priced_rows(const sizes *s)
{
    const job_spec *j = &s->job;
    const job_moe *e = &j->model.moe;
    size_t worst = sizes_moe_worst_rows(s), rows;
    if (e->experts < 1) return 0;
    if (e->capacity_factor > 0) {
        /* each expert keeps at most `capacity` choices of a sample (of its
         * whole sequence under cp, all of which may sit on this rank's
         * chunk): El experts, micro_batch samples, from each ep rank */
        int ep = sizes_ep(s), Tf = model_seq_len(&j->model);
        rows = (size_t)ep * (size_t)(e->experts / ep) * (size_t)j->train.micro_batch *
               (size_t)job_moe_capacity(e, Tf);
    } else {
        rows = (size_t)ceil((double)sizes_moe_even_rows(s) * SIZES_MOE_MARGIN);
    }
    return rows < worst ? rows : worst;
}

void sizes_ep_stage(const sizes *s, size_t *tok_rows, size_t *exp_rows)
{
    const job_spec *j = &s->job;
    *tok_rows = *exp_rows = 0;
    if (sizes_ep(s) == 1 || j->model.moe.experts < 1) return;
    *tok_rows = moe_rank_rows(s) * (size_t)j->model.moe.top_k;
    *exp_rows = sizes_moe_priced_rows(s);
    /* under tp the experts' side holds every token-side row for a moment (ep.c) */
    if (j->parallel.tp > 1 && *exp_rows < *tok_rows) *exp_rows = *tok_rows;
}

size_t sizes_ep_stage_tp_at(const sizes *s, size_t exp_rows)
{
    size_t tp = (size_t)s->job.parallel.tp, E = (size_t)s->job.model.moe.experts;
    /* ep.c's slots: tp of at most exp / tp rows (rounded up) + a row of
     * padding per (rank, expert) block */
    return exp_rows > 0 && tp > 1 && sizes_ep(s) > 1 ? tp * ((exp_rows + tp - 1) / tp + E) : 0;
}

size_t sizes_ep_stage_numel_at(const sizes *s, size_t exp_rows)
{
    size_t tok, exp;
    sizes_ep_stage(s, &tok, &exp);
    if (exp == 0) return 0;
    size_t tpr = sizes_ep_stage_tp_at(s, exp_rows);
    /* a row more each (ep.c: tensor parallelism's zero row), the tp slots,
     * + the reorders' ints */
    return (tok + exp_rows + 2 + tpr) * (size_t)s->job.model.d_model + exp_rows + tpr + 1;
}

size_t sizes_ep_stage_numel(const sizes *s)
{
    size_t tok, exp;
    sizes_ep_stage(s, &tok, &exp);
    return sizes_ep_stage_numel_at(s, exp);
}

/* Units [*begin, *end) of global chunk c. */
static void chunk_units(const sizes *s, int c, int *begin, int *end)
{
    *begin = s->first_unit[c];
    *end = s->first_unit[c + 1];
}

/* What the units of one rank add up to, in one pass over them. */
typedef struct {
    size_t numel;               /* whole units (tp-local) */
    size_t shard[3];            /* per sizes_shard_of: the rank's slices */
    size_t largest;             /* the largest unit */
    size_t frozen_shard;        /* train.lora: the rank's part of the frozen base */
    size_t largest_frozen;      /* its largest unit's, whole */
} held_totals;

static held_totals held(const sizes *s, sizes_at at)
{
    held_totals h;
    memset(&h, 0, sizeof h);
    int pp = s->job.parallel.pp;
    for (int local = 0; local < s->job.parallel.virtual_stages; local++) {
        int b, e;
        chunk_units(s, pp_chunk_id(at.pp, local, pp), &b, &e);
        for (int u = b; u < e; u++) {
            size_t n = sizes_unit_numel(s, u, at.tp), f = sizes_unit_frozen_numel(s, u, at.tp);
            h.numel += n;
            if (n > h.largest) h.largest = n;
            if (f > h.largest_frozen) h.largest_frozen = f;
            for (int w = SHARD_OF_PARAM; w <= SHARD_OF_OPTIM; w++)
                h.shard[w] += sizes_shard(s, (sizes_shard_of)w, u, at, NULL);
            h.frozen_shard += sizes_frozen_shard(s, u, at, NULL);
        }
    }
    return h;
}

static size_t largest_held_unit(const sizes *s, sizes_at at)
{
    return held(s, at).largest;
}

/* Local chunk `local`'s largest unit (whole: the fp32 working copy widens a
 * unit's train.lora frozen tensors too, model.c; and *largest_train, of its
 * trainable ones: the working gradient's) and the optimizer's chunk (min of
 * its widest slice and OPTIM_SCRATCH_NUMEL, as optim.c sizes its scratch
 * and offload's staging). */
static void chunk_widths(const sizes *s, sizes_at at, int local, size_t *largest, size_t *largest_train,
                         size_t *scratch)
{
    int b, e;
    chunk_units(s, pp_chunk_id(at.pp, local, s->job.parallel.pp), &b, &e);
    size_t widest = 0;
    *largest = *largest_train = 0;
    for (int u = b; u < e; u++) {
        size_t t = sizes_unit_numel(s, u, at.tp), n = t + sizes_unit_frozen_numel(s, u, at.tp);
        size_t w = sizes_shard(s, SHARD_OF_OPTIM, u, at, NULL);
        if (n > *largest) *largest = n;
        if (t > *largest_train) *largest_train = t;
        if (w > widest) widest = w;
    }
    *scratch = widest < OPTIM_SCRATCH_NUMEL ? (widest ? widest : 1) : OPTIM_SCRATCH_NUMEL;
}

size_t sizes_mixed_work_bytes(const sizes *s, sizes_at at)
{
    if (!s->mixed) return 0;
    int grad_bf16 = sizes_grad_elem_bytes(s) == 2;
    size_t bytes = 0, widest = 0, widest_train = 0;
    for (int local = 0; local < s->job.parallel.virtual_stages; local++) {
        size_t largest, largest_train, scratch;
        chunk_widths(s, at, local, &largest, &largest_train, &scratch);
        /* the optimizer's scratch widens bf16 gradients for the norm only
         * (optim.c: the step widens them in adamw_mixed_multi's registers):
         * one per chunk's optimizer */
        bytes += (size_t)grad_bf16 * scratch * sizeof(float);
        if (largest > widest) widest = largest;
        if (largest_train > widest_train) widest_train = largest_train;
    }
    /* the model's working copies: one set the rank's chunks share (they
     * compute one unit at a time: model_share_mixed_work): the largest
     * unit's parameters (train.lora: with its frozen tensors) and, with bf16
     * gradients, the largest unit's trainable ones' gradient */
    return bytes + (widest + (size_t)grad_bf16 * (widest_train ? widest_train : 1)) * sizeof(float);
}

/* train.offload: optimizer: per chunk the step's host staging
 * (optim_host_scratch_bytes): two chunks of gradients in transit, with bf16
 * parameters two chunks of them, with bf16 gradients one chunk widened. */
static size_t offload_staging_bytes(const sizes *s, sizes_at at)
{
    size_t bytes = 0, ge = sizes_grad_elem_bytes(s), pe = sizes_param_elem_bytes(s);
    size_t per = 2 * ge + (pe == 2 ? 2 * 2 : 0) + (ge == 2 ? sizeof(float) : 0);
    for (int local = 0; local < s->job.parallel.virtual_stages; local++) {
        size_t largest, largest_train, scratch;
        chunk_widths(s, at, local, &largest, &largest_train, &scratch);
        bytes += scratch * per;
    }
    return bytes;
}

size_t sizes_gather_numel(const sizes *s, sizes_at at)
{
    shard_mode mode = s->job.parallel.mode;
    if (mode != SHARD_FSDP && mode != SHARD_HSDP) return 0;
    /* nothing to gather, unless the one shard lives on the host (offload: params) */
    if (sizes_shard_group(s, SHARD_OF_PARAM) == 1 && !(s->job.train.offload & OFFLOAD_PARAMS)) return 0;
    return largest_held_unit(s, at);
}

size_t sizes_frozen_gather_numel(const sizes *s, sizes_at at)
{
    shard_mode mode = s->job.parallel.mode;
    if ((mode != SHARD_FSDP && mode != SHARD_HSDP) || sizes_shard_group(s, SHARD_OF_PARAM) == 1) return 0;
    return held(s, at).largest_frozen;
}

int sizes_gather_buffers(const sizes *s) { (void)s; return 2; }

size_t sizes_reduce_numel(const sizes *s, sizes_at at)
{
    if (s->job.parallel.mode != SHARD_ZERO2 || sizes_grad_dp(s) == 1) return 0;
    return largest_held_unit(s, at);
}

int sizes_reduce_buffers(const sizes *s) { (void)s; return 2; }

size_t sizes_bucket_numel(const sizes *s, sizes_at at)
{
    shard_mode mode = s->job.parallel.mode;
    if ((mode != SHARD_NONE && mode != SHARD_ZERO1) || sizes_grad_dp(s) == 1) return 0;
    size_t bucket = (size_t)s->job.parallel.bucket_mb * MIB / sizes_reduce_elem_bytes(s);
    size_t grads = held(s, at).numel;
    return bucket < grads ? bucket : grads;
}

size_t sizes_first_bucket_numel(const sizes *s, sizes_at at)
{
    size_t bucket = sizes_bucket_numel(s, at), first = MIB / sizes_reduce_elem_bytes(s);
    return bucket < first ? bucket : first;
}

long sizes_bucket_count(const sizes *s, sizes_at at)
{
    size_t bucket = sizes_bucket_numel(s, at), first = sizes_first_bucket_numel(s, at);
    size_t grads = held(s, at).numel;
    if (bucket == 0) return 0;
    return grads <= first ? 1 : 1 + (long)((grads - first + bucket - 1) / bucket);
}

static model_shard chunk_shard(const sizes *s, int chunk, int tp_rank)
{
    model_shard sh = {.tp_rank = tp_rank, .tp_size = s->job.parallel.tp, .sp = seq_parallel(s),
                      .cp_rank = 0, .cp_size = s->job.parallel.cp, .ep_rank = 0, .ep_size = sizes_ep(s)};
    chunk_units(s, chunk, &sh.unit_begin, &sh.unit_end);
    return sh;
}

static model_precision job_precision(const sizes *s)
{
    return (model_precision){.bf16 = s->job.train.precision == PREC_BF16,
                             .grad_bf16 = s->job.train.grad_dtype == DTYPE_BF16,
                             .acts_on_host = (s->job.train.offload & OFFLOAD_ACTIVATIONS) != 0};
}

model_acts_size sizes_chunk_acts(const sizes *s, int chunk, int tp_rank)
{
    model_shard sh = chunk_shard(s, chunk, tp_rank);
    model_precision prec = job_precision(s);
    model_acts_size z = model_acts_sizes(&s->job.model, &sh, s->job.train.micro_batch, s->job.train.recompute, &prec);
    /* (model.moe: the rows that arrive at the experts are the rank's, not a
     * stash slot's: sizes_moe_rows_memory) */
    /* ZB-H1: each micro-batch also keeps its blocks' matmul output gradients from
     * its B to its W (model_acts_create_split), as long as its stash */
    if (s->sched && s->job.parallel.pp_schedule == PP_ZB_H1)
        z.stash += model_acts_wkeep_bytes(&s->job.model, &sh, s->job.train.micro_batch, &prec);
    return z;
}

size_t sizes_chunk_acts_bytes(const sizes *s, int chunk, int tp_rank)
{
    model_acts_size z = sizes_chunk_acts(s, chunk, tp_rank);
    return z.stash + z.work;
}

int sizes_acts_slots(const sizes *s, int chunk)
{
    if (!s->sched) return 1;
    return s->sched->slots[chunk];
}

int sizes_rank_acts_slots(const sizes *s, int pp_rank)
{
    if (!s->sched) return 1;
    return s->sched->rank_slots[pp_rank];
}

/* A pipeline rank's activations (pp_exec.h), each chunk sized once: the
 * stashes (each chunk's own pool of sizes_acts_slots, or one pool of the
 * rank's, whichever is smaller: pp_stash_pool_bytes; *pooled says which),
 * the working sets (each chunk's own part and the largest scratch, which the
 * chunks share), the stashes' host part, and the activation slots. */
typedef struct {
    size_t stash, work, host, live;
    int pooled;
} rank_acts;

static rank_acts rank_acts_of(const sizes *s, sizes_at at)
{
    int pp = s->job.parallel.pp, v = s->job.parallel.virtual_stages;
    rank_acts r = {0};
    /* (v is small, but bounded only by pp x m x v: a few on the stack keep
     * the planner's search free of mallocs) */
    int slots_few[8], *slots = v <= 8 ? slots_few : malloc((size_t)v * sizeof *slots);
    size_t stash_few[8], *stash = v <= 8 ? stash_few : malloc((size_t)v * sizeof *stash), scratch = 0, apart = 0;
    for (int local = 0; local < v; local++) {
        int c = pp_chunk_id(at.pp, local, pp), n = sizes_acts_slots(s, c);
        model_acts_size z = sizes_chunk_acts(s, c, at.tp);
        if (slots && stash) slots[local] = n, stash[local] = z.stash;
        apart += (size_t)n * z.stash;
        r.work += z.work - z.scratch;
        if (z.scratch > scratch) scratch = z.scratch;
        r.host += (size_t)n * z.host;
        r.live += (size_t)n;
    }
    r.work += scratch;
    /* (no memory for v counts: each chunk's own pool, an upper bound) */
    r.stash = slots && stash ? pp_stash_pool_bytes(v, slots, stash, s->sched->rank_slots[at.pp], &r.pooled) : apart;
    if (slots != slots_few) free(slots);
    if (stash != stash_few) free(stash);
    return r;
}

size_t sizes_stash_bytes(const sizes *s, sizes_at at, int *pooled)
{
    if (!s->sched) {
        if (pooled) *pooled = 0;
        return sizes_chunk_acts(s, 0, at.tp).stash;
    }
    rank_acts r = rank_acts_of(s, at);
    if (pooled) *pooled = r.pooled;
    return r.stash;
}

/* What the head adds to each micro-batch's stash on the last chunk (its input
 * and loss statistics): the difference to the same units without the head, so
 * the model's layout stays its own. Without the head the stash also lacks the
 * stream entering the head ([B, seq, C] elements, or its 1/tp with sequence
 * parallelism: the output of a stage without the head lives in the working
 * set), which is not the head's but the blocks' output, so that much is added
 * back. */
static size_t head_extra_bytes(const sizes *s, int tp_rank)
{
    int last = s->chunks - 1;
    model_shard with = chunk_shard(s, last, tp_rank), without = with;
    without.unit_end--;
    int B = s->job.train.micro_batch;
    recompute_kind rc = s->job.train.recompute;
    model_precision prec = job_precision(s);
    size_t a = model_acts_sizes(&s->job.model, &with, B, rc, &prec).stash;
    size_t b = model_acts_sizes(&s->job.model, &without, B, rc, &prec).stash;
    size_t rows = (size_t)B * (size_t)model_seq_len(&s->job.model) / (size_t)s->job.parallel.cp /
                  (seq_parallel(s) ? (size_t)s->job.parallel.tp : 1);
    size_t io = rows * (size_t)s->job.model.d_model * (prec.bf16 ? 2 : sizeof(float));
    b += io;
    return a > b ? a - b : 0;
}

size_t sizes_acts_host_bytes(const sizes *s)
{
    return model_acts_host_bytes(&s->job.model, s->job.train.micro_batch);
}

int sizes_batch_samples(const sizes *s)
{
    int mb = s->job.train.micro_batch;
    return s->sched ? s->job.parallel.microbatches * mb : mb;
}

size_t sizes_batch_bytes(const sizes *s)
{
    const job_model *m = &s->job.model;
    size_t n = (size_t)sizes_batch_samples(s);
    /* tokens and targets (packed samples: positions and segments too) */
    if (job_model_is_lm(m)) return (m->packed ? 4 : 2) * n * (size_t)m->seq_len * sizeof(int);
    return n * (size_t)m->channels * (size_t)m->image_size * (size_t)m->image_size * sizeof(float) +
           n * sizeof(int);
}

size_t sizes_graph_input_bytes(const sizes *s)
{
    const job_spec *j = &s->job;
    if (!j->train.cuda_graphs) return 0;
    const job_model *m = &j->model;
    size_t n = (size_t)j->train.micro_batch * (size_t)j->train.grad_accum; /* per rank: pp 1 */
    if (job_model_is_lm(m)) return 2 * n * (size_t)m->seq_len * sizeof(int);
    return n * (size_t)m->channels * (size_t)m->image_size * (size_t)m->image_size * sizeof(float) + n * sizeof(int);
}

size_t sizes_graph_bytes(const sizes *s)
{
    return s->job.train.cuda_graphs ? sizes_graph_input_bytes(s) + SIZES_GRAPH_SCALARS_BYTES : 0;
}

size_t sizes_tied_scratch_numel(const sizes *s, sizes_at at)
{
    int pp = s->job.parallel.pp, L = s->job.model.n_layer;
    if (!job_model_tied_head(&s->job.model) || pp == 1) return 0;
    if (at.pp == pp_chunk_rank(0, pp)) return sizes_unit_numel(s, 0, at.tp);
    if (at.pp == pp_chunk_rank(s->chunks - 1, pp)) return sizes_unit_numel(s, L + 1, at.tp);
    return 0;
}

size_t sizes_tp_stage_numel(const sizes *s)
{
    const job_spec *j = &s->job;
    if (j->parallel.tp < 2 || !s->mixed) return 0;
    /* the rows this rank computes: its 1/cp of the sequence under context
     * parallelism (the tp collectives never carry another cp rank's rows) */
    return (size_t)j->train.micro_batch * (size_t)(model_seq_len(&j->model) / j->parallel.cp) *
           (size_t)j->model.d_model;
}

size_t sizes_cp_ring_numel(const sizes *s)
{
    const job_spec *j = &s->job;
    int cp = j->parallel.cp, tp = j->parallel.tp;
    if (cp < 2) return 0;
    size_t rows = (size_t)j->train.micro_batch * (size_t)(j->model.seq_len / cp);
    int nh = j->model.n_head / tp;
    size_t Cl = (size_t)(j->model.d_model / tp), NHl = (size_t)nh;
    /* two buffers of rows x (k and v, then their gradient or the fp32 result):
     * 4 Cl without GQA (cp.c) */
    size_t k2 = (size_t)dt_kv_cols((int)Cl, nh, model_kv_heads_local(&j->model, tp)), second = k2 > Cl ? k2 : Cl;
    return 2 * rows * (k2 + second) + rows * Cl + rows * NHl;
}

/* model_moe_rows_sizes of chunk c on tp rank tp for `rows` arrived rows. */
static model_acts_size moe_rows_of(const sizes *s, int c, int tp, size_t rows)
{
    model_shard sh = chunk_shard(s, c, tp);
    model_precision prec = job_precision(s);
    return model_moe_rows_sizes(&s->job.model, &sh, s->job.train.micro_batch, s->job.train.recompute, &prec, rows);
}

/* The working set of the MoE blocks' experts' rows: one block at a time on
 * the rank, the largest chunk's. */
static size_t moe_rank_work(const sizes *s, sizes_at at, size_t rows)
{
    int pp = s->job.parallel.pp, v = s->sched ? s->job.parallel.virtual_stages : 1;
    size_t most = 0;
    for (int local = 0; local < v; local++) {
        size_t w = moe_rows_of(s, s->sched ? pp_chunk_id(at.pp, local, pp) : 0, at.tp, rows).work;
        if (w > most) most = w;
    }
    return most;
}

/* The experts' rows the micro-batches in flight on the rank hold at once:
 * each holds its MoE blocks' from their forward to their backward (moe.c),
 * whichever chunk they are in, so the most at any point of the rank's
 * schedule (pp_schedule: fewer than the chunks' own peaks added up under an
 * interleaved one, sizes_acts_slots); without its action lists (the
 * planner's memory pass) those peaks added up, a bound. */
static size_t moe_rank_stash(const sizes *s, sizes_at at, size_t rows)
{
    int pp = s->job.parallel.pp, v = s->sched ? s->job.parallel.virtual_stages : 1;
    const pp_schedule *sc = sizes_schedule(s);
    if (!s->sched) return moe_rows_of(s, 0, at.tp, rows).stash;
    /* each local chunk's per micro-batch, sized once */
    size_t few[8], *per = v <= 8 ? few : malloc((size_t)v * sizeof *per), bound = 0;
    for (int local = 0; local < v; local++) {
        int c = pp_chunk_id(at.pp, local, pp);
        size_t one = moe_rows_of(s, c, at.tp, rows).stash;
        if (per) per[local] = one;
        bound += (size_t)sizes_acts_slots(s, c) * one;
    }
    /* (no memory for v sizes: the chunks' peaks added up, a bound) */
    size_t live = 0, most = bound;
    if (sc && per && bound > 0) {
        most = 0;
        for (int i = 0; i < sc->n_actions[at.pp]; i++) {
            const pp_action *a = &sc->actions[at.pp][i];
            if (a->op == PP_OP_FORWARD) {
                live += per[pp_chunk_local(a->chunk, pp)];
                if (live > most) most = live;
            } else if (a->op == PP_OP_BACKWARD) {
                live -= per[pp_chunk_local(a->chunk, pp)];
            }
        }
    }
    if (per != few) free(per);
    return most;
}

void sizes_moe_rows_memory(const sizes *s, sizes_at at, size_t rows, size_t *acts, size_t *staging)
{
    *acts = s->job.model.moe.experts > 0 ? moe_rank_stash(s, at, rows) + moe_rank_work(s, at, rows) : 0;
    *staging = sizes_ep_stage_numel_at(s, rows) * sizeof(float);
}

void sizes_rank_memory(const sizes *s, sizes_at at, sizes_memory *out)
{
    memset(out, 0, sizeof *out);
    size_t pe = sizes_param_elem_bytes(s), ge = sizes_grad_elem_bytes(s);
    held_totals h = held(s, at);
    size_t optim_elems = h.shard[SHARD_OF_OPTIM];
    /* train.lora: the frozen base besides (sharded like the parameters: FSDP's group) */
    out->bytes[SIZES_PARAMS] = (h.shard[SHARD_OF_PARAM] + h.frozen_shard) * pe;
    out->bytes[SIZES_MASTER] = s->mixed ? optim_elems * 4 : 0;
    out->bytes[SIZES_GRADS] = h.shard[SHARD_OF_GRAD] * ge;
    out->bytes[SIZES_OPTIM] = optim_elems * 8; /* m and v, fp32 */
    if (s->job.train.offload & OFFLOAD_OPTIMIZER) {
        /* m, v and an fp32 master (in fp32 training too) live on the host */
        out->host = optim_elems * 12 + offload_staging_bytes(s, at);
        out->bytes[SIZES_MASTER] = out->bytes[SIZES_OPTIM] = 0;
    }
    if (s->job.train.offload & OFFLOAD_PARAMS) {
        /* the FSDP parameter shards too: each unit comes to a gather buffer */
        out->host += out->bytes[SIZES_PARAMS];
        out->host_params = out->bytes[SIZES_PARAMS];
        out->bytes[SIZES_PARAMS] = 0;
    }
    /* the gradient collectives run in the reduce type: a DDP bucket holds it; a
     * ZeRO-2 / FSDP gradient buffer of another type has a twin in it */
    size_t re = sizes_reduce_elem_bytes(s), twin = re != ge ? re : 0;
    out->bytes[SIZES_COMM] = sizes_gather_numel(s, at) * (size_t)sizes_gather_buffers(s) * (pe + ge + twin) +
                             sizes_frozen_gather_numel(s, at) * (size_t)sizes_gather_buffers(s) * pe +
                             sizes_reduce_numel(s, at) * (size_t)sizes_reduce_buffers(s) * (ge + twin) +
                             sizes_bucket_numel(s, at) * re + sizes_tied_scratch_numel(s, at) * ge +
                             sizes_tp_stage_numel(s) * 2 + sizes_cp_ring_numel(s) * sizeof(float) +
                             sizes_ep_stage_numel(s) * sizeof(float);
    /* a grad pool (ZeRO-2's, FSDP's) with bf16 reductions widens the reduced
     * chunks through min(its buffers' numel, OPTIM_SCRATCH_NUMEL) floats
     * (grad_pool_wide_numel) */
    size_t pool = sizes_gather_numel(s, at) + sizes_reduce_numel(s, at);
    if (pool && re == 2) out->bytes[SIZES_COMM] += (pool < OPTIM_SCRATCH_NUMEL ? pool : OPTIM_SCRATCH_NUMEL) * 4;

    /* The executor's stashes for the whole run (pp_exec.h): each local chunk
     * a pool of sizes_acts_slots of them, or (several chunks) one pool of the
     * rank, as many as the most micro-batches of all its chunks in flight at
     * once, each its largest chunk's size: whichever is smaller
     * (pp_stash_pool_bytes). Plus each chunk's own working set and one scratch
     * the chunks share (the largest; model_share_scratch): rank_acts_of. */
    int pp = s->job.parallel.pp;
    size_t acts = 0, live = 0, acts_host = 0; /* train.offload: activations: the stashes' host part */
    if (!s->sched) {
        model_acts_size z = sizes_chunk_acts(s, 0, at.tp);
        acts = z.stash + z.work;
        acts_host = z.host;
        live = 1;
    } else {
        rank_acts r = rank_acts_of(s, at);
        acts = r.stash + r.work;
        acts_host = r.host;
        live = r.live;
    }
    out->host += acts_host;
    /* model.moe: the experts' rows at the priced rows (sizes_moe_rows_memory) */
    size_t moe_acts, moe_staging;
    sizes_moe_rows_memory(s, at, sizes_moe_priced_rows(s), &moe_acts, &moe_staging);
    acts += moe_acts;
    size_t logits = 0;
    if (pp_chunk_rank(s->chunks - 1, pp) == at.pp) {
        /* the head's stash per micro-batch in flight, and its chunk of logits
         * in the last chunk's working set (once) */
        model_shard last = chunk_shard(s, s->chunks - 1, at.tp);
        logits = head_extra_bytes(s, at.tp) * (size_t)sizes_acts_slots(s, s->chunks - 1) +
                 model_acts_head_chunk_bytes(&s->job.model, &last, s->job.train.micro_batch);
    }
    if (logits > acts) logits = acts;
    out->bytes[SIZES_ACTS] = acts - logits;
    out->bytes[SIZES_LOGITS] = logits;
    /* on a GPU the host buffers are host memory, not device memory */
    out->bytes[SIZES_WORKSPACE] = s->env.gpu ? 0 : sizes_acts_host_bytes(s) * live + sizes_batch_bytes(s);
    out->bytes[SIZES_WORKSPACE] += sizes_mixed_work_bytes(s, at) + sizes_graph_bytes(s);
    for (int c = 0; c < SIZES_COUNT; c++) out->total += out->bytes[c];
}

int sizes_worst_tp_rank(const sizes *s, int pp_rank)
{
    int best = 0;
    size_t best_total = 0;
    for (int r = 0; r < s->job.parallel.tp; r++) {
        /* tp ranks with the same shard sizes (every rank, when tp divides heads,
         * d_ff and vocab) hold the same memory: size only the first of them */
        int seen = 0;
        for (int q = 0; q < r && !seen; q++)
            seen = s->numel_emb[q] == s->numel_emb[r] && s->numel_block[q] == s->numel_block[r] &&
                   s->numel_moe[q] == s->numel_moe[r] && s->numel_head[q] == s->numel_head[r] &&
                   s->numel_exp[q] == s->numel_exp[r];
        if (seen) continue;
        sizes_memory mem;
        sizes_rank_memory(s, (sizes_at){0, pp_rank, r}, &mem);
        if (r == 0 || mem.total > best_total) best = r, best_total = mem.total;
    }
    return best;
}

const char *sizes_category_name(sizes_category c)
{
    static const char *const names[SIZES_COUNT] = {"params", "master", "grads", "optimizer",
                                                   "activations", "logits", "comm", "workspace"};
    return c >= 0 && c < SIZES_COUNT ? names[c] : "?";
}
