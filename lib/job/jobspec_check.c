/* jobspec_check.c — every rule a resolved job must satisfy: each value in its
 * range, then the combinations (shapes that divide, batch arithmetic, pipeline
 * and data constraints). The message says what and why; the caller adds where. */
#include "lib/job/jobspec_check.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "lib/job/jobspec_fields.h"
#include "lib/job/jobspec_layout.h"
#include "lib/job/jobspec_lora.h"
#include "lib/job/jobspec_presets.h"
#include "lib/job/jobspec_utf8.h"

typedef struct {
    int *blame;
    char *msg;
    size_t n;
} verdict;

/* Record a failure: the keys to blame (-1 terminated, at most JOB_BLAME_MAX)
 * and the message. Always returns -1. */
static int fail(verdict *v, const int *fids, const char *fmt, ...)
{
    int i = 0;
    for (; i < JOB_BLAME_MAX && fids[i] >= 0; i++) v->blame[i] = fids[i];
    if (i < JOB_BLAME_MAX) v->blame[i] = -1;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(v->msg, v->n, fmt, ap);
    va_end(ap);
    return -1;
}

#define BLAME(...) ((const int[]){__VA_ARGS__, -1})

/* One value on its own: range, enum index, string format. */
static int check_field(const job_spec *job, int fid, verdict *v)
{
    const field_def *f = &job_fields[fid];
    if (!job_field_applies(job, fid) || job_field_unset(job, fid)) return 0;
    if (f->section == SEC_MOE && job->model.moe.experts == 0) return 0; /* no MoE: unused */
    if (f->section == SEC_MLA && !job_model_mla(&job->model)) return 0; /* no MLA: unused */
    /* the key's name and range are formatted only for a message: --plan
     * validates thousands of layouts, nearly all of them valid */
    char name[64] = "", range[96] = "";
#define FIELD_FAIL(...) \
    (job_field_full_name(fid, name, sizeof name), job_field_range_text(fid, range, sizeof range), \
     fail(v, BLAME(fid), __VA_ARGS__))
    const void *p = job_field_cptr(job, fid);
    switch (f->type) {
    case FT_INT: {
        int x = *(const int *)p;
        if (job_field_in_range(fid, x)) return FIELD_FAIL("%s %s, got %d", name, range, x);
        return 0;
    }
    case FT_LONG: {
        long x = *(const long *)p;
        if (job_field_in_range(fid, (double)x)) return FIELD_FAIL("%s %s, got %ld", name, range, x);
        return 0;
    }
    case FT_U64:
        return 0;
    case FT_DOUBLE: {
        double x = *(const double *)p;
        if (!isfinite(x)) return FIELD_FAIL("%s must be a finite number", name);
        if (job_field_in_range(fid, x)) return FIELD_FAIL("%s %s, got %g", name, range, x);
        return 0;
    }
    case FT_BOOL: {
        int x = *(const int *)p;
        if (x != 0 && x != 1) return FIELD_FAIL("%s must be true or false (0 or 1), got %d", name, x);
        return 0;
    }
    case FT_FLAGS: {
        int x = *(const int *)p, count = 0;
        while (f->names[count]) count++;
        if (x < 0 || x >= 1 << count) return FIELD_FAIL("%s has no value %d", name, x);
        return 0;
    }
    case FT_ENUM: {
        int x = *(const int *)p, count = 0;
        while (f->names[count]) count++;
        if (x < 0 || x >= count) return FIELD_FAIL("%s has no value number %d", name, x);
        return 0;
    }
    default: {
        const char *s = p;
        if (!memchr(s, 0, f->size))
            return FIELD_FAIL("%s is not terminated within %zu bytes", name, f->size);
        if (!utf8_valid(s, strlen(s))) return FIELD_FAIL("%s is not valid UTF-8", name);
        char why[128];
        if (job_field_check_string(fid, s, why, sizeof why)) return FIELD_FAIL("%s %s", name, why);
        if (f->type == FT_PRESET && s[0] && !job_preset_find(s))
            return FIELD_FAIL("%s: unknown preset '%s'", name, s);
        return 0;
    }
    }
}
#undef FIELD_FAIL

/* Tokens per sample: what sequence parallelism splits. */
static long tokens_per_sample(const job_model *m)
{
    if (job_model_is_lm(m)) return m->seq_len;
    long side = m->image_size / m->patch_size;
    return side * side + 1; /* patches + class token */
}

/* Context parallelism: a language model's causal attention over a sequence
 * cut into 2 cp chunks (cp.h). */
static int check_cp(const job_spec *job, verdict *v)
{
    const job_model *m = &job->model;
    const job_parallel *par = &job->parallel;
    if (par->cp == 1) return 0;
    if (!job_model_is_lm(m))
        return fail(v, BLAME(FID_CP, FID_MODEL_KIND),
                    "parallel.cp %d needs model.kind gpt or llama (context parallelism splits a language model's token "
                    "sequence; a ViT's "
                    "%ld patches are short enough for tp and sequence_parallel)", par->cp, tokens_per_sample(m));
    if (m->seq_len % (2 * par->cp))
        return fail(v, BLAME(FID_CP, FID_SEQ_LEN, FID_MODEL_PRESET),
                    "parallel.cp %d cuts model.seq_len %d into 2 x cp = %d equal chunks (causal load balancing), "
                    "which does not divide it",
                    par->cp, m->seq_len, 2 * par->cp);
    if (par->sequence_parallel && m->seq_len / par->cp % par->tp)
        return fail(v, BLAME(FID_SEQUENCE_PARALLEL, FID_CP, FID_TP, FID_SEQ_LEN),
                    "parallel.sequence_parallel splits each cp rank's %d tokens (seq_len %d / cp %d) across tp %d, "
                    "which does not divide them",
                    m->seq_len / par->cp, m->seq_len, par->cp, par->tp);
    return 0;
}

/* Llama: grouped-query attention's heads, RoPE's pairs, the positions, and
 * how tensor parallelism splits the key/value heads: tp dividing n_kv_head
 * splits them; tp above it (a multiple of it) gives each rank the one kv
 * head its query heads read, replicated over tp / n_kv_head ranks
 * (Megatron-Core's and vLLM's rule), whose gradients those ranks sum. */
static int check_llama(const job_spec *job, verdict *v)
{
    const job_model *m = &job->model;
    const job_parallel *par = &job->parallel;
    if (m->kind != MODEL_LLAMA) return 0;
    int kv = job_model_kv_heads(m);
    if (m->n_head % kv)
        return fail(v, BLAME(FID_N_KV_HEAD, FID_N_HEAD, FID_MODEL_PRESET),
                    "model.n_head %d is not a multiple of model.n_kv_head %d (grouped-query attention shares each "
                    "key/value head among n_head / n_kv_head query heads)",
                    m->n_head, kv);
    if (m->d_model / m->n_head % 2)
        return fail(v, BLAME(FID_N_HEAD, FID_D_MODEL, FID_MODEL_PRESET),
                    "model.d_model %d / n_head %d = %d channels a head, which is odd (rotary embeddings turn pairs "
                    "of a head's channels)",
                    m->d_model, m->n_head, m->d_model / m->n_head);
    if (m->max_positions < m->seq_len)
        return fail(v, BLAME(FID_MAX_POSITIONS, FID_SEQ_LEN, FID_MODEL_PRESET),
                    "model.max_positions %d is less than model.seq_len %d (a training sample's positions must be "
                    "ones the model takes)",
                    m->max_positions, m->seq_len);
    if (par->tp <= kv ? kv % par->tp : par->tp % kv)
        return fail(v, BLAME(FID_TP, FID_N_KV_HEAD, FID_MODEL_PRESET),
                    "parallel.tp %d and model.n_kv_head %d: tensor parallelism splits the key/value heads (tp must "
                    "divide n_kv_head) or, above n_kv_head, replicates each over tp / n_kv_head ranks (tp must be a "
                    "multiple of n_kv_head)",
                    par->tp, kv);
    return 0;
}

static int check_model(const job_spec *job, verdict *v)
{
    const job_model *m = &job->model;
    const job_parallel *par = &job->parallel;
    if (m->d_model % m->n_head)
        return fail(v, BLAME(FID_N_HEAD, FID_D_MODEL, FID_MODEL_PRESET),
                    "model.d_model %d is not divisible by model.n_head %d (each head takes d_model / n_head channels)",
                    m->d_model, m->n_head);
    if (m->kind == MODEL_VIT && m->image_size % m->patch_size)
        return fail(v, BLAME(FID_PATCH_SIZE, FID_IMAGE_SIZE, FID_MODEL_PRESET),
                    "model.image_size %d is not divisible by model.patch_size %d (patches must tile the image)",
                    m->image_size, m->patch_size);
    if (m->n_head % par->tp)
        return fail(v, BLAME(FID_TP, FID_N_HEAD, FID_MODEL_PRESET),
                    "model.n_head %d is not divisible by parallel.tp %d (tensor parallelism splits the heads)",
                    m->n_head, par->tp);
    if (m->d_ff % par->tp)
        return fail(v, BLAME(FID_TP, FID_D_FF, FID_D_MODEL, FID_MODEL_PRESET),
                    "model.d_ff %d is not divisible by parallel.tp %d (tensor parallelism splits the MLP)",
                    m->d_ff, par->tp);
    if (check_llama(job, v)) return -1;
    /* No vocab_size check: tp rank r holds vocabulary rows [floor(V*r/tp),
     * floor(V*(r+1)/tp)) of wte and of the head's logits, so GPT-2's 50257 splits
     * as it is, with no padded rows to mask in the loss or keep out of checkpoints. */
    long long stages = (long long)par->pp * par->virtual_stages;
    if (m->n_layer < stages) {
        if (par->virtual_stages > 1)
            return fail(v, BLAME(FID_PP, FID_VIRTUAL_STAGES, FID_N_LAYER, FID_MODEL_PRESET),
                        "model.n_layer %d is fewer than parallel.pp %d x virtual_stages %d (every pipeline stage "
                        "needs at least one block)",
                        m->n_layer, par->pp, par->virtual_stages);
        return fail(v, BLAME(FID_PP, FID_N_LAYER, FID_MODEL_PRESET),
                    "model.n_layer %d is fewer than parallel.pp %d (every pipeline stage needs at least one block)",
                    m->n_layer, par->pp);
    }
    if (par->sequence_parallel && par->tp == 1)
        return fail(v, BLAME(FID_SEQUENCE_PARALLEL, FID_TP),
                    "parallel.sequence_parallel needs parallel.tp > 1 (it splits activations across the tp group)");
    if (par->tp_split > 1 && !(par->sequence_parallel && par->tp > 1))
        return fail(v, BLAME(FID_TP_SPLIT, FID_SEQUENCE_PARALLEL, FID_TP),
                    "parallel.tp_split %d splits the forward's GEMMs along the rows sequence parallelism gathers "
                    "and scatters: it needs parallel.tp > 1 and sequence_parallel: true",
                    par->tp_split);
    if (par->sequence_parallel && tokens_per_sample(m) % par->tp) {
        if (job_model_is_lm(m))
            return fail(v, BLAME(FID_SEQUENCE_PARALLEL, FID_TP, FID_SEQ_LEN),
                        "parallel.sequence_parallel splits the %ld tokens of a sample (model.seq_len) across tp %d, "
                        "which does not divide them",
                        tokens_per_sample(m), par->tp);
        return fail(v, BLAME(FID_SEQUENCE_PARALLEL, FID_TP, FID_PATCH_SIZE),
                    "parallel.sequence_parallel splits the %ld tokens of an image (patches + class token) across "
                    "tp %d, which does not divide them",
                    tokens_per_sample(m), par->tp);
    }
    return check_cp(job, v);
}

/* model.moe: the experts a token can pick, the blocks that are MoE, and the
 * layouts the MoE layer runs under (every one but CUDA graphs and the
 * zero-bubble schedule; under tp each expert splits as the dense MLP does,
 * expert tensor parallelism = tp). */
static int check_moe(const job_spec *job, verdict *v)
{
    const job_model *m = &job->model;
    const job_moe *e = &m->moe;
    const job_parallel *par = &job->parallel;
    if (e->experts == 0) return 0;
    if (e->top_k > e->experts)
        return fail(v, BLAME(FID_MOE_TOP_K, FID_MOE_EXPERTS),
                    "model.moe.top_k %d is more than model.moe.experts %d (each token picks top_k different experts)",
                    e->top_k, e->experts);
    if (job_moe_layers(m) == 0)
        return fail(v, BLAME(FID_MOE_FIRST_DENSE, FID_N_LAYER, FID_MODEL_PRESET),
                    "model.moe.first_dense %d leaves no MoE block among the model's %d blocks (first_dense counts "
                    "the dense blocks before the first MoE one)",
                    e->first_dense, m->n_layer);
    if (e->d_ff_expert % par->tp)
        return fail(v, BLAME(FID_TP, FID_MOE_D_FF_EXPERT),
                    "model.moe.d_ff_expert %d is not divisible by parallel.tp %d (tensor parallelism splits each "
                    "expert's MLP as model.d_ff's)", e->d_ff_expert, par->tp);
    if (job->train.cuda_graphs)
        return fail(v, BLAME(FID_CUDA_GRAPHS, FID_MOE_EXPERTS),
                    "train.cuda_graphs with model.moe: the grouped expert GEMMs take each step's tokens-per-expert "
                    "counts from the host, which a recorded graph cannot (set cuda_graphs: false)");
    if (par->pp > 1 && par->pp_schedule == PP_ZB_H1)
        return fail(v, BLAME(FID_PP_SCHEDULE, FID_MOE_EXPERTS),
                    "parallel.pp_schedule zb-h1 with model.moe: the MoE blocks have no split backward (their expert "
                    "weight gradients come with the input gradient); use 1f1b or interleaved");
    return 0;
}

/* parallel.ep: the routed experts split over ep ranks folded into dp x cp
 * (Megatron-Core's MoE Parallel Folding): each rank holds experts / ep of
 * them, and the experts' data-parallel group is dp x cp / ep. With dp: auto
 * dp is 1 until the world is known (job_resolve_world checks again; a world
 * that makes it 1 is refused by the mesh, mesh_set_ep). */
static int check_ep(const job_spec *job, verdict *v)
{
    const job_parallel *par = &job->parallel;
    const job_moe *e = &job->model.moe;
    if (par->ep == 1) return 0;
    if (e->experts == 0)
        return fail(v, BLAME(FID_EP),
                    "parallel.ep %d needs model.moe (expert parallelism splits the routed experts over ranks; this "
                    "model has none)", par->ep);
    if (e->experts % par->ep)
        return fail(v, BLAME(FID_EP, FID_MOE_EXPERTS),
                    "parallel.ep %d does not divide model.moe.experts %d (each ep rank holds experts / ep of them)",
                    par->ep, e->experts);
    long long dpcp = (long long)par->dp * par->cp;
    if (!(par->dp_auto && par->dp == 1) && dpcp % par->ep)
        return fail(v, BLAME(FID_EP, FID_DP, FID_CP),
                    "parallel.ep %d does not divide dp %d x cp %d = %lld (the ep ranks are folded into the data-"
                    "parallel ones: the experts' data-parallel group is dp x cp / ep)", par->ep, par->dp, par->cp, dpcp);
    return 0;
}

static int check_batch(const job_spec *job, verdict *v)
{
    const job_train *t = &job->train;
    const job_parallel *par = &job->parallel;
    if (t->min_lr > t->lr)
        return fail(v, BLAME(FID_MIN_LR, FID_LR), "train.min_lr %g is larger than train.lr %g (the decay's floor)",
                    t->min_lr, t->lr);
    long long per_step = (long long)t->micro_batch * par->dp;
    if (t->global_batch % per_step)
        return fail(v, BLAME(FID_MICRO_BATCH, FID_GLOBAL_BATCH, FID_DP),
                    "train.global_batch %d is not divisible by micro_batch %d x dp %d (each step is whole "
                    "micro-batches on every data-parallel rank)",
                    t->global_batch, t->micro_batch, par->dp);
    long long accum = t->global_batch / per_step;
    if (t->grad_accum != accum)
        return fail(v, BLAME(FID_MICRO_BATCH, FID_GLOBAL_BATCH, FID_DP),
                    "train.grad_accum %d does not equal global_batch / (micro_batch x dp) = %d / (%d x %d) = %lld",
                    t->grad_accum, t->global_batch, t->micro_batch, par->dp, accum);
    if (par->microbatches != accum)
        return fail(v, BLAME(FID_MICROBATCHES, FID_MICRO_BATCH, FID_GLOBAL_BATCH, FID_DP),
                    "parallel.microbatches %d does not match global_batch / (micro_batch x dp) = %d / (%d x %d) = "
                    "%lld; set only one of microbatches and micro_batch, or make them agree",
                    par->microbatches, t->global_batch, t->micro_batch, par->dp, accum);
    return 0;
}

static int check_parallel(const job_spec *job, verdict *v)
{
    const job_parallel *par = &job->parallel;
    if ((job->train.offload & OFFLOAD_ACTIVATIONS) && job->train.recompute != RECOMPUTE_BLOCK)
        return fail(v, BLAME(FID_OFFLOAD, FID_RECOMPUTE),
                    "train.offload: activations moves the block inputs that train.recompute: block keeps (DeepSpeed's "
                    "cpu_checkpointing); set train.recompute: block, not %s", job_recompute_name(job->train.recompute));
    if ((job->train.offload & OFFLOAD_PARAMS) && par->mode != SHARD_FSDP && par->mode != SHARD_HSDP)
        return fail(v, BLAME(FID_OFFLOAD, FID_MODE),
                    "train.offload: params needs parallel.mode fsdp or hsdp (the parameters come to the device "
                    "a unit at a time, where FSDP gathers them), not %s", job_shard_mode_name(par->mode));
    if ((job->train.offload & OFFLOAD_PARAMS) && !(job->train.offload & OFFLOAD_OPTIMIZER))
        return fail(v, BLAME(FID_OFFLOAD), "train.offload: params needs optimizer too (the update runs where the "
                                           "parameters live): train.offload: [optimizer, params]");
    if (job->train.precision == PREC_FP32 && job->train.grad_dtype == DTYPE_BF16)
        return fail(v, BLAME(FID_GRAD_DTYPE, FID_PRECISION),
                    "train.grad_dtype bf16 needs train.precision: bf16 (fp32 training keeps fp32 gradients)");
    if (job->train.precision == PREC_FP32 && par->reduce_dtype == DTYPE_BF16)
        return fail(v, BLAME(FID_REDUCE_DTYPE, FID_PRECISION),
                    "parallel.reduce_dtype bf16 needs train.precision: bf16 (fp32 training reduces fp32 gradients)");
    if (par->pp_schedule == PP_INTERLEAVED && par->pp == 1)
        return fail(v, BLAME(FID_PP_SCHEDULE, FID_PP),
                    "parallel.pp_schedule interleaved needs parallel.pp > 1 (it interleaves model chunks across "
                    "pipeline ranks; with pp 1 there is no pipeline)");
    if (par->pp_schedule == PP_INTERLEAVED && par->virtual_stages < 2)
        return fail(v, BLAME(FID_VIRTUAL_STAGES, FID_PP_SCHEDULE),
                    "parallel.pp_schedule interleaved needs virtual_stages >= 2 (model chunks per pipeline rank), "
                    "got %d",
                    par->virtual_stages);
    if (par->pp_schedule != PP_INTERLEAVED && par->virtual_stages != 1)
        return fail(v, BLAME(FID_VIRTUAL_STAGES, FID_PP_SCHEDULE),
                    "parallel.virtual_stages %d needs pp_schedule: interleaved (the schedule is %s)",
                    par->virtual_stages, job_pp_schedule_name(par->pp_schedule));
    /* the schedule's own rules (the worker builds it with the same check) */
    char why[256];
    if (par->pp > 1 &&
        job_layout_check_pipeline(par->pp_schedule, par->pp, par->microbatches, par->virtual_stages, why, sizeof why))
        return fail(v, BLAME(FID_MICROBATCHES, FID_PP_SCHEDULE, FID_PP, FID_GLOBAL_BATCH), "%s", why);
    int zb_blame;
    if (par->pp_schedule == PP_ZB_H1 && par->pp > 1 &&
        job_layout_check_zero_bubble(par, job->train.recompute, &zb_blame, why, sizeof why))
        return fail(v, BLAME(zb_blame, FID_PP_SCHEDULE), "%s", why);
    int graphs_blame;
    if (job_layout_check_graphs(job, &graphs_blame, why, sizeof why))
        return fail(v, BLAME(graphs_blame, FID_CUDA_GRAPHS), "%s", why);
    if (par->mode == SHARD_HSDP && par->dp == 1 && !par->dp_auto)
        return fail(v, BLAME(FID_MODE, FID_DP),
                    "parallel.mode hsdp needs parallel.dp > 1 (it shards and replicates across data-parallel ranks)");
    return 0;
}

static int check_data(const job_spec *job, verdict *v)
{
    const job_data *d = &job->data;
    const char *kind = job_data_kind_name(d->kind);
    if (d->kind == DATA_SYNTHETIC) {
        if (d->train_path[0])
            return fail(v, BLAME(FID_DATA_TRAIN, FID_DATA_KIND),
                        "data.train is set but data.kind is synthetic; set data.kind to text, tokens or idx");
        if (d->val_path[0])
            return fail(v, BLAME(FID_DATA_VAL, FID_DATA_KIND),
                        "data.val is set but data.kind is synthetic; set data.kind to text, tokens or idx");
        if (job_model_is_lm(&job->model) && d->synthetic_size < (long)job->model.seq_len + 1)
            return fail(v, BLAME(FID_SYNTHETIC_SIZE, FID_SEQ_LEN, FID_MODEL_PRESET),
                        "data.synthetic_size %ld tokens is less than one sample of seq_len + 1 = %d tokens",
                        d->synthetic_size, job->model.seq_len + 1);
    } else if (!d->train_path[0]) {
        return fail(v, BLAME(FID_DATA_KIND, FID_DATA_TRAIN), "data.kind %s needs data.train (the training data path)",
                    kind);
    }
    if (d->kind == DATA_IDX && job_model_is_lm(&job->model))
        return fail(v, BLAME(FID_DATA_KIND, FID_MODEL_KIND, FID_MODEL_PRESET),
                    "data.kind idx holds images, which a %s model cannot read (use text or tokens, or a vit model)",
                    job_model_kind_name(job->model.kind));
    if (d->kind == DATA_SFT && job->model.kind == MODEL_VIT)
        return fail(v, BLAME(FID_DATA_KIND, FID_MODEL_KIND, FID_MODEL_PRESET),
                    "data.kind sft holds instruction samples of tokens, which a vit model cannot read (use a gpt or "
                    "llama model)");
    if (d->kind == DATA_SFT && job->model.attention == ATTN_NAIVE)
        return fail(v, BLAME(FID_ATTENTION, FID_DATA_KIND),
                    "data.kind sft needs model.attention fused (the document mask of packed samples is the fused "
                    "attention's; naive materialises a causal mask across them)");
    if (d->kind == DATA_SFT && job->train.cuda_graphs)
        return fail(v, BLAME(FID_CUDA_GRAPHS, FID_DATA_KIND),
                    "data.kind sft does not work with train.cuda_graphs (each step's loss divides by its batch's "
                    "own count of masked-in targets, which a recorded step cannot take); turn one of them off");
    if ((d->kind == DATA_TEXT || d->kind == DATA_TOKENS) && job->model.kind == MODEL_VIT)
        return fail(v, BLAME(FID_DATA_KIND, FID_MODEL_KIND, FID_MODEL_PRESET),
                    "data.kind %s holds tokens, which a vit model cannot read (use idx or synthetic, or a gpt or llama "
                    "model)",
                    kind);
    if (d->kind == DATA_IDX) {
        if (!d->train_labels[0])
            return fail(v, BLAME(FID_DATA_TRAIN_LABELS, FID_DATA_TRAIN, FID_DATA_KIND),
                        "data.kind idx needs data.train_labels (the IDX labels file that goes with data.train)");
        if (d->val_path[0] && !d->val_labels[0])
            return fail(v, BLAME(FID_DATA_VAL_LABELS, FID_DATA_VAL),
                        "data.val needs data.val_labels with idx data (the IDX labels file that goes with it)");
        if (!d->val_path[0] && d->val_labels[0])
            return fail(v, BLAME(FID_DATA_VAL_LABELS), "data.val_labels is set but data.val is not");
    } else {
        if (d->train_labels[0])
            return fail(v, BLAME(FID_DATA_TRAIN_LABELS), "data.train_labels applies to idx data only (data.kind is %s)",
                        kind);
        if (d->val_labels[0])
            return fail(v, BLAME(FID_DATA_VAL_LABELS), "data.val_labels applies to idx data only (data.kind is %s)",
                        kind);
    }
    return 0;
}

static int check_checkpoint(const job_spec *job, verdict *v)
{
    if (job->checkpoint.every > 0 && !job->checkpoint.dir[0])
        return fail(v, BLAME(FID_CKPT_EVERY),
                    "checkpoint.every is %d but checkpoint.dir is not set (where would checkpoints go?)",
                    job->checkpoint.every);
    return 0;
}

int job_check(const job_spec *job, int blame[JOB_BLAME_MAX], char *msg, size_t n)
{
    verdict v = {blame, msg, n};
    for (int f = 0; f < FID_COUNT; f++)
        if (check_field(job, f, &v)) return -1;
    if (check_model(job, &v) || check_ep(job, &v) || check_moe(job, &v) || check_batch(job, &v) || check_parallel(job, &v) || check_data(job, &v) ||
        check_checkpoint(job, &v))
        return -1;
    if (job_check_lora(job, blame, msg, n)) return -1;
    blame[0] = -1;
    if (n) msg[0] = 0;
    return 0;
}

int job_validate(const job_spec *job, char *err, size_t errlen)
{
    int blame[JOB_BLAME_MAX];
    char msg[512];
    if (job_check(job, blame, msg, sizeof msg) == 0) return 0;
    return job_fail_blame(job, blame, JOB_BLAME_MAX, msg, err, errlen);
}
