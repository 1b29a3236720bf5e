/* model.c — the model object: the units it holds, their flat parameter and
 * gradient buffers, the hooks and layers, and forward/backward through the held units.
 * The per-unit math lives in gpt.c, vit.c and block.c. */
#include "runtime/model/model_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int held(const model *m, int unit)
{
    return unit >= m->shard.unit_begin && unit < m->shard.unit_end;
}

static model *fail_create(model *m, const char *why)
{
    fprintf(stderr, "dtrun: model: %s\n", why);
    model_destroy(m);
    return NULL;
}

model *model_create(const job_model *spec, const model_shard *shard, const dt_ops *ops,
                    recompute_kind recompute)
{
    return model_create_prec(spec, shard, ops, recompute, NULL);
}

const model_precision *model_get_precision(const model *m) { return &m->prec; }

model *model_create_prec(const job_model *spec, const model_shard *shard, const dt_ops *ops,
                         recompute_kind recompute, const model_precision *prec)
{
    const model_shard *sh = shard;
    if (spec->n_head <= 0 || spec->d_model % spec->n_head != 0 || sh->tp_size < 1 ||
        sh->tp_rank < 0 || sh->tp_rank >= sh->tp_size || spec->n_head % sh->tp_size != 0 ||
        sh->unit_begin < 0 || sh->unit_begin >= sh->unit_end ||
        sh->unit_end > model_n_units(spec)) {
        fprintf(stderr, "dtrun: model: bad shard (units [%d,%d) of %d, tp rank %d of %d, "
                        "%d heads)\n", sh->unit_begin, sh->unit_end, model_n_units(spec),
                sh->tp_rank, sh->tp_size, spec->n_head);
        return NULL;
    }
    int kv = job_model_kv_heads(spec);
    if (spec->kind == MODEL_LLAMA &&
        (spec->n_head % kv != 0 || (sh->tp_size <= kv ? kv % sh->tp_size : sh->tp_size % kv) != 0)) {
        fprintf(stderr, "dtrun: model: tp %d does not split or replicate %d key/value heads of %d heads\n",
                sh->tp_size, kv, spec->n_head);
        return NULL;
    }
    int cp = sh->cp_size > 1 ? sh->cp_size : 1;
    if (cp > 1 && (!job_model_is_lm(spec) || model_seq_len(spec) % (2 * cp) != 0 || sh->cp_rank < 0 ||
                   sh->cp_rank >= cp)) {
        fprintf(stderr, "dtrun: model: context parallelism %d needs a language model whose %d tokens split into %d "
                        "chunks (cp rank %d)\n", cp, model_seq_len(spec), 2 * cp, sh->cp_rank);
        return NULL;
    }
    /* every micro-batch, down to one sample, must split into equal row parts */
    if (sh->sp && model_seq_len(spec) / cp % sh->tp_size != 0) {
        fprintf(stderr, "dtrun: model: sequence parallelism splits each sample's %d tokens over tp %d, "
                        "which does not divide them\n", model_seq_len(spec), sh->tp_size);
        return NULL;
    }
    int ep = sh->ep_size > 1 ? sh->ep_size : 1;
    if (ep > 1 && (spec->moe.experts < 1 || spec->moe.experts % ep != 0 || sh->ep_rank < 0 || sh->ep_rank >= ep)) {
        fprintf(stderr, "dtrun: model: expert parallelism %d needs model.moe with experts (%d) it divides (ep rank "
                        "%d)\n", ep, spec->moe.experts, sh->ep_rank);
        return NULL;
    }
    model *m = calloc(1, sizeof *m);
    if (!m) return NULL;
    m->spec = *spec;
    m->shard = *sh;
    m->ops = ops;
    if (prec) m->prec = *prec;
    m->prec.grad_bf16 = m->prec.bf16 && m->prec.grad_bf16;
    m->act = m->prec.bf16 ? DT_BF16 : DT_F32;
    model_local_layers(m, &m->layers);
    m->local = m->layers;
    model_local_attention(m, &m->attn);
    m->recompute = recompute;
    model_dims_of(spec, sh, &m->d);
    m->n_held = sh->unit_end - sh->unit_begin;
    int L = spec->n_layer;
    m->has_emb = sh->unit_begin == 0;
    m->has_head = sh->unit_end == L + 2;
    m->first_block = sh->unit_begin > 1 ? sh->unit_begin : 1;
    int last_block = sh->unit_end - 1 < L ? sh->unit_end - 1 : L;
    m->n_blocks = last_block >= m->first_block ? last_block - m->first_block + 1 : 0;

    int n = m->n_held;
    m->params = calloc((size_t)n, sizeof(void *));
    m->grads = calloc((size_t)n, sizeof(void *));
    m->own_params = calloc((size_t)n, sizeof(void *));
    m->own_grads = calloc((size_t)n, sizeof(void *));
    m->unit_numel = calloc((size_t)n, sizeof(size_t));
    m->unit_first_spec = calloc((size_t)n + 1, sizeof(int));
    m->frozen = calloc((size_t)n, sizeof(void *));
    m->own_frozen = calloc((size_t)n, sizeof(void *));
    m->frozen_numel = calloc((size_t)n, sizeof(size_t));
    if (!m->params || !m->grads || !m->own_params || !m->own_grads || !m->unit_numel ||
        !m->unit_first_spec || !m->frozen || !m->own_frozen || !m->frozen_numel)
        return fail_create(m, "out of host memory");

    int total_specs = 0;
    for (int u = sh->unit_begin; u < sh->unit_end; u++)
        total_specs += model_unit_param_count(spec, u);
    m->specs = calloc((size_t)total_specs, sizeof(param_spec));
    if (!m->specs) return fail_create(m, "out of host memory");
    for (int u = sh->unit_begin; u < sh->unit_end; u++) {
        int k = u - sh->unit_begin, np = model_unit_param_count(spec, u);
        m->unit_first_spec[k] = m->n_specs;
        for (int i = 0; i < np; i++)
            model_unit_param_spec_ep(spec, u, i, sh->tp_rank, sh->tp_size, sh->ep_rank, sh->ep_size,
                                     &m->specs[m->n_specs++]);
        m->unit_numel[k] = model_unit_numel_ep(spec, u, sh->tp_rank, sh->tp_size, sh->ep_size);
        /* train.lora refuses model.moe: the frozen buffer never holds experts */
        m->frozen_numel[k] = model_unit_frozen_numel(spec, u, sh->tp_rank, sh->tp_size);
        /* ops->alloc zeroes: the grads start at zero (a unit with nothing to
         * train, LoRA's embedding and head, still gets a buffer) */
        size_t nt = m->unit_numel[k] ? m->unit_numel[k] : 1;
        m->own_params[k] = ops->alloc(nt * model_param_elem_bytes(m));
        m->own_grads[k] = ops->alloc(nt * model_grad_elem_bytes(m));
        if (m->frozen_numel[k]) m->own_frozen[k] = ops->alloc(m->frozen_numel[k] * model_param_elem_bytes(m));
        if (m->unit_numel[k] + m->frozen_numel[k] > m->work_numel) m->work_numel = m->unit_numel[k] + m->frozen_numel[k];
        if (m->unit_numel[k] > m->work_gnumel) m->work_gnumel = m->unit_numel[k];
        if (!m->own_params[k] || !m->own_grads[k] || (m->frozen_numel[k] && !m->own_frozen[k]))
            return fail_create(m, "out of device memory for the parameters");
        m->params[k] = m->own_params[k];
        m->grads[k] = m->own_grads[k];
        m->frozen[k] = m->own_frozen[k];
    }
    m->unit_first_spec[n] = m->n_specs;
    if (moe_state_create(m) != 0) return fail_create(m, "out of memory for the MoE blocks' state");
    if (m->prec.bf16) {
        if (!(m->mw = calloc(1, sizeof *m->mw))) return fail_create(m, "out of host memory");
        size_t gn = m->prec.grad_bf16 ? (m->work_gnumel ? m->work_gnumel : 1) : 0;
        *m->mw = (model_mixed_work){.w_unit = -1, .wg_unit = -1, .numel = m->work_numel, .gnumel = gn, .refs = 1};
        if (!(m->mw->wparam = ops->alloc(m->work_numel * sizeof(float))))
            return fail_create(m, "out of device memory for the fp32 working parameters");
        if (gn && !(m->mw->wgrad = ops->alloc(gn * sizeof(float))))
            return fail_create(m, "out of device memory for the fp32 working gradients");
    }
    return m;
}

static void mixed_work_release(model *m)
{
    model_mixed_work *w = m->mw;
    m->mw = NULL;
    if (!w || --w->refs > 0) return;
    if (w->wparam) m->ops->free(w->wparam);
    if (w->wgrad) m->ops->free(w->wgrad);
    free(w);
}

int model_share_mixed_work(model *const *ms, int n)
{
    if (n < 1 || !ms[0]->mw) return 0;
    /* the largest model's copies serve every unit of them all */
    model *big = ms[0], *gbig = ms[0];
    for (int i = 0; i < n; i++) {
        if (!ms[i]->mw || ms[i]->ops != big->ops || ms[i]->prec.grad_bf16 != big->prec.grad_bf16) return -1;
        if (ms[i]->mw->numel > big->mw->numel) big = ms[i];
        if (ms[i]->mw->gnumel > gbig->mw->gnumel) gbig = ms[i];
    }
    /* train.lora: the widest parameters and the widest trainable gradient
     * may be different chunks': the largest of each, in one set */
    if (gbig->mw != big->mw) {
        model_mixed_work *w = big->mw;
        if (w->wgrad) big->ops->free(w->wgrad);
        w->wgrad = NULL;
        w->gnumel = gbig->mw->gnumel;
        if (w->gnumel && !(w->wgrad = big->ops->alloc(w->gnumel * sizeof(float)))) return -1;
    }
    for (int i = 0; i < n; i++) {
        if (ms[i]->mw == big->mw) continue;
        mixed_work_release(ms[i]);
        ms[i]->mw = big->mw;
        big->mw->refs++;
    }
    return 0;
}

size_t model_param_elem_bytes(const model *m) { return m->prec.bf16 ? 2 : 4; }
size_t model_grad_elem_bytes(const model *m) { return m->prec.grad_bf16 ? 2 : 4; }

size_t model_mixed_work_bytes(const model *m)
{
    if (!m->mw) return 0;
    return (m->mw->numel + (m->mw->wgrad ? m->mw->gnumel : 0)) * sizeof(float);
}

void model_destroy(model *m)
{
    if (!m) return;
    if (m->work_mem) m->ops->free(m->work_mem);
    model_scratch_release(m);
    for (int k = 0; k < m->n_held; k++) {
        if (m->own_params) m->ops->free(m->own_params[k]);
        if (m->own_grads) m->ops->free(m->own_grads[k]);
        if (m->own_frozen && m->own_frozen[k]) m->ops->free(m->own_frozen[k]);
    }
    mixed_work_release(m);
    moe_state_destroy(m);
    free(m->params);
    free(m->grads);
    free(m->own_params);
    free(m->own_grads);
    free(m->unit_numel);
    free(m->unit_first_spec);
    free(m->frozen);
    free(m->own_frozen);
    free(m->frozen_numel);
    free(m->specs);
    free(m);
}

const model_shard *model_get_shard(const model *m) { return &m->shard; }
const job_model *model_get_spec(const model *m) { return &m->spec; }

void *model_unit_params(model *m, int unit)
{
    return held(m, unit) ? m->params[unit - m->shard.unit_begin] : NULL;
}

void *model_unit_grads(model *m, int unit)
{
    return held(m, unit) ? m->grads[unit - m->shard.unit_begin] : NULL;
}

size_t model_unit_local_numel(const model *m, int unit)
{
    return held(m, unit) ? m->unit_numel[unit - m->shard.unit_begin] : 0;
}

void model_unit_bind(model *m, int unit, void *params, void *grads)
{
    if (!held(m, unit)) return;
    int k = unit - m->shard.unit_begin;
    if (params) m->params[k] = params;
    if (grads) m->grads[k] = grads;
}

void *model_unit_frozen(model *m, int unit)
{
    return held(m, unit) ? m->frozen[unit - m->shard.unit_begin] : NULL;
}

size_t model_unit_frozen_local_numel(const model *m, int unit)
{
    return held(m, unit) ? m->frozen_numel[unit - m->shard.unit_begin] : 0;
}

void model_unit_bind_frozen(model *m, int unit, void *frozen)
{
    if (held(m, unit) && frozen) m->frozen[unit - m->shard.unit_begin] = frozen;
}

void model_unit_release_frozen(model *m, int unit)
{
    if (!held(m, unit)) return;
    int k = unit - m->shard.unit_begin;
    if (m->frozen[k] == m->own_frozen[k]) m->frozen[k] = NULL;
    if (m->own_frozen[k]) m->ops->free(m->own_frozen[k]);
    m->own_frozen[k] = NULL;
}

void model_unit_release(model *m, int unit)
{
    if (!held(m, unit)) return;
    int k = unit - m->shard.unit_begin;
    if (m->params[k] == m->own_params[k]) m->params[k] = NULL;
    if (m->grads[k] == m->own_grads[k]) m->grads[k] = NULL;
    m->ops->free(m->own_params[k]);
    m->ops->free(m->own_grads[k]);
    m->own_params[k] = NULL;
    m->own_grads[k] = NULL;
}

int model_param_count(const model *m) { return m->n_specs; }

const param_spec *model_param(const model *m, int i)
{
    return i >= 0 && i < m->n_specs ? &m->specs[i] : NULL;
}

void *model_param_data(model *m, int i)
{
    const param_spec *p = &m->specs[i];
    int k = p->unit - m->shard.unit_begin;
    char *base = p->frozen ? m->frozen[k] : m->params[k];
    return base ? base + p->offset * model_param_elem_bytes(m) : NULL;
}

void *model_param_grad(model *m, int i)
{
    const param_spec *p = &m->specs[i];
    char *base = p->frozen ? NULL : m->grads[p->unit - m->shard.unit_begin];
    return base ? base + p->offset * model_grad_elem_bytes(m) : NULL;
}

/* A bf16 unit's tensors are valid only while the unit is being computed: any
 * other use is a programming error in the model's code, so stop loudly. */
static void not_working(const model *m, int unit, const char *what)
{
    fprintf(stderr, "dtrun: model: unit %d's %s read outside its computation (working unit %d)\n", unit, what,
            m->mw && m->mw->p_of == m ? m->mw->w_unit : -1);
    abort();
}

float *unit_tensor(model *m, int unit, int i)
{
    int k = unit - m->shard.unit_begin;
    const param_spec *p = &m->specs[m->unit_first_spec[k] + i];
    if (!m->prec.bf16) return (float *)(p->frozen ? m->frozen[k] : m->params[k]) + p->offset;
    if (m->mw->p_of != m || unit != m->mw->w_unit) not_working(m, unit, "parameters");
    return m->mw->wparam + (p->frozen ? m->unit_numel[k] : 0) + p->offset;
}

const void *unit_weight(model *m, int unit, int i)
{
    if (!m->prec.bf16) return unit_tensor(m, unit, i);
    int k = unit - m->shard.unit_begin;
    const param_spec *p = &m->specs[m->unit_first_spec[k] + i];
    return (const uint16_t *)(p->frozen ? m->frozen[k] : m->params[k]) + p->offset;
}

/* bf16 gradients: does the working gradient hold this model's unit? */
static int working_grads(const model *m, int unit) { return m->mw->g_of == m && unit == m->mw->wg_unit; }

float *unit_tensor_grad(model *m, int unit, int i)
{
    int k = unit - m->shard.unit_begin;
    const param_spec *p = &m->specs[m->unit_first_spec[k] + i];
    if (p->frozen) return NULL; /* train.lora: no gradient kept */
    size_t off = p->offset;
    if (!m->prec.grad_bf16) return (float *)m->grads[k] + off;
    if (!working_grads(m, unit)) not_working(m, unit, "gradients");
    return m->mw->wgrad + off;
}

void unit_grad_add(model *m, int unit, int i, const float *src, size_t n)
{
    if (!m->prec.grad_bf16 || working_grads(m, unit)) {
        float *g = unit_tensor_grad(m, unit, i);
        m->ops->residual_forward(g, g, src, n, DT_F32);
        return;
    }
    int k = unit - m->shard.unit_begin;
    m->ops->acc_bf16((uint16_t *)m->grads[k] + m->specs[m->unit_first_spec[k] + i].offset, src, n);
}

void model_zero_grads(model *m)
{
    for (int k = 0; k < m->n_held; k++)
        if (m->grads[k]) m->ops->zero(m->grads[k], m->unit_numel[k] * model_grad_elem_bytes(m));
}

void model_set_hooks(model *m, const model_hooks *hooks)
{
    if (hooks) m->hooks = *hooks;
    else memset(&m->hooks, 0, sizeof m->hooks);
}

void model_set_layers(model *m, const model_layers *layers)
{
    m->layers_set = layers != NULL;
    if (layers) m->layers = *layers;
    else model_local_layers(m, &m->layers);
}

void model_set_attention(model *m, const model_attention *attention)
{
    m->attn_set = attention != NULL;
    if (attention) m->attn = *attention;
    else model_local_attention(m, &m->attn);
}

/* Split shards computed through the local layers would be silently wrong: a
 * programming error in the strategy, not a user error, so stop loudly. */
static void check_layers(const model *m)
{
    if (m->d.cp_size > 1 && !m->attn_set) {
        fprintf(stderr, "dtrun: model: cp_size %d but no context-parallel attention is set\n", m->d.cp_size);
        abort();
    }
    if (m->shard.tp_size == 1 || m->layers_set) return;
    fprintf(stderr, "dtrun: model: tp_size %d but no tensor-parallel layers are set\n", m->shard.tp_size);
    abort();
}

float *model_ln_grads_begin(model *m, const block_scratch *s, int n)
{
    if (s->norm_sink) { /* frozen norms (train.lora): their gradients go nowhere */
        m->ops->zero(s->norm_sink, (size_t)n * (size_t)m->d.C * sizeof(float));
        return s->norm_sink;
    }
    if (m->d.sp_size == 1) return NULL;
    m->ops->zero(s->ln_grads, (size_t)n * (size_t)m->d.C * sizeof(float));
    return s->ln_grads;
}

/* The sum over tp is taken apart from the gradient buffers, never on them in
 * place: they hold earlier micro-batches' gradients too, which every rank
 * already has in full and a SUM would count tp times. */
void model_ln_grads_finish(model *m, const block_scratch *s, float *const *dst, int n)
{
    if (m->d.sp_size == 1 || s->norm_sink) return;
    size_t C = (size_t)m->d.C;
    m->layers.rows_grad_sum(m->layers.ctx, s->ln_grads, (size_t)n * C);
    for (int i = 0; i < n; i++) m->ops->residual_forward(dst[i], dst[i], s->ln_grads + (size_t)i * C, C, DT_F32);
}

void model_hook_before(model *m, int unit, model_phase phase)
{
    if (m->hooks.before) m->hooks.before(m->hooks.ctx, unit, phase);
}

/* Before a unit computes (after its before() hook, which may have rebound it):
 * under bf16 its parameters widened into the working copy, and in backward with
 * bf16 gradients the working gradient zeroed. fp32: nothing. */
/* bf16 gradients: the unit's fp32 working gradient, zeroed, for one
 * micro-batch's backward (or a zero-bubble pipeline's B or W pass of it). */
static void unit_grads_begin(model *m, int unit)
{
    if (!m->prec.grad_bf16) return;
    int k = unit - m->shard.unit_begin;
    m->ops->zero(m->mw->wgrad, m->unit_numel[k] * sizeof(float));
    m->mw->g_of = m;
    m->mw->wg_unit = unit;
}

static void unit_begin(model *m, int unit, model_phase phase)
{
    int k = unit - m->shard.unit_begin;
    if (m->prec.bf16) {
        m->ops->from_bf16(m->mw->wparam, m->params[k], m->unit_numel[k]);
        if (m->frozen_numel[k]) m->ops->from_bf16(m->mw->wparam + m->unit_numel[k], m->frozen[k], m->frozen_numel[k]);
        m->mw->p_of = m;
        m->mw->w_unit = unit;
    }
    if (phase == PHASE_BACKWARD) unit_grads_begin(m, unit);
}

/* After a unit's backward, before its after(BACKWARD) hook: bf16 gradients take
 * the micro-batch's fp32 gradient with one rounding. A split backward does it
 * after B and again after W: each element is written by one of the two (B: the
 * layernorms', W: the matmuls'), and adding the other pass's zero to a bf16
 * value is exact, so every element still takes its one rounding. */
static void unit_grads_end(model *m, int unit)
{
    if (!m->prec.grad_bf16) return;
    int k = unit - m->shard.unit_begin;
    m->ops->acc_bf16(m->grads[k], m->mw->wgrad, m->unit_numel[k]);
    m->mw->g_of = NULL;
    m->mw->wg_unit = -1;
}

void model_hook_after(model *m, int unit, model_phase phase)
{
    if (m->hooks.after) m->hooks.after(m->hooks.ctx, unit, phase);
}

/* The residual stream entering the k-th block held (k = n_blocks: leaving the
 * last), of the activations' type. Strided by the capacity, not the batch:
 * model_acts_output must not move when a smaller batch (the last of an
 * evaluation) passes through. */
static void *stream_at(model_acts *a, int k)
{
    if (k == a->m->n_blocks) return a->out;
    return act_at(a->m, a->stream, (size_t)k * model_acts_io_numel(a->m, a->B));
}

/* train.offload: activations (model_precision.acts_on_host): the stream
 * entering blocks 1 .. n-1 lives in host memory. Entry k passes through
 * working buffer xbuf[k % 2] and crosses on the copy queue (ops->copy_start),
 * so that it travels while the next block computes: down after the block that
 * wrote it, and up again (prefetched one block ahead) before the recompute of
 * the block that reads it. A buffer is reused only once its last copy has
 * finished. */
static int stream_offloaded(const model_acts *a, int k)
{
    return a->hstream && k > 0 && k < a->m->n_blocks;
}

static void *host_entry(const model_acts *a, int k)
{
    return act_at(a->m, a->hstream, (size_t)(k - 1) * model_acts_io_numel(a->m, a->B));
}

/* Working buffer k % 2, once no copy uses it any more. */
static void *work_buffer(model_acts *a, int k)
{
    int i = k % 2;
    a->m->ops->copy_finish(a->pend[i]);
    a->pend[i] = NULL;
    return a->xbuf[i];
}

/* Every copy done (the end of a forward: the host then holds every entry). */
static void copies_finish(model_acts *a)
{
    for (int i = 0; i < 2; i++) {
        a->m->ops->copy_finish(a->pend[i]);
        a->pend[i] = NULL;
    }
}

/* Entry k (n elements) starts up from the host into its working buffer. */
static void stream_prefetch(model_acts *a, int k, size_t n)
{
    if (!stream_offloaded(a, k)) return;
    void *dst = work_buffer(a, k);
    a->pend[k % 2] = a->m->ops->copy_start(dst, host_entry(a, k), n * dt_dtype_size(a->m->act));
}

/* Where the block before entry k writes it: the stash, or (offloaded) its
 * working buffer. */
static void *stream_dst(model_acts *a, int k)
{
    return stream_offloaded(a, k) ? work_buffer(a, k) : stream_at(a, k);
}

/* Entry k, just written at y (n elements), starts down to the host when it
 * lives there. */
static void stream_keep(model_acts *a, int k, const void *y, size_t n)
{
    if (stream_offloaded(a, k))
        a->pend[k % 2] = a->m->ops->copy_start(host_entry(a, k), y, n * dt_dtype_size(a->m->act));
}

/* Entry k for its block's backward: the stash's, or its working buffer once
 * the prefetch has landed. */
static const void *stream_get(model_acts *a, int k)
{
    return stream_offloaded(a, k) ? work_buffer(a, k) : stream_at(a, k);
}

/* The set block k computes in: its own kept one, or the shared working set
 * (block recompute, which rebuilds it from the block's input). */
static block_acts acts_of_block(model_acts *a, int k)
{
    if (!a->work_blk_on) {
        block_acts w = a->blk[k];
        if (a->bs.att_shared) w.att = a->bs.att_shared; /* selective: it may have moved (naive only) */
        return w;
    }
    return a->work_blk;
}

static int batch_size(const model_acts *a, const model_batch *batch)
{
    if (batch->B < 1 || batch->B > a->B) {
        fprintf(stderr, "dtrun: model: micro-batch of %d samples, activations sized for %d\n",
                batch->B, a->B);
        abort();
    }
    return batch->B;
}

/* The embedding's backward between its hooks (fp32 and bf16 paths alike);
 * with the tied head in this object both wte copies get the whole gradient. */
static void embedding_backward(model *m, model_acts *a, int B, int tied_here, int split)
{
    model_hook_before(m, 0, PHASE_BACKWARD);
    unit_begin(m, 0, PHASE_BACKWARD);
    if (job_lora_on(&m->spec)) ; /* a frozen embedding: nothing to compute */
    else if (job_model_is_lm(&m->spec)) gpt_embedding_backward(m, a, a->dres, B);
    else vit_embedding_backward(m, a, a->dres, B);
    if (tied_here) gpt_tied_grads_finish(m, a);
    unit_grads_end(m, 0);
    if (!split) model_hook_after(m, 0, PHASE_BACKWARD);
}

/* The head's forward between its hooks: the micro-batch's summed loss. */
static double head_forward(model *m, model_acts *a, const model_batch *batch, const float *x, int *correct)
{
    int head = m->spec.n_layer + 1;
    double loss;
    model_hook_before(m, head, PHASE_FORWARD);
    unit_begin(m, head, PHASE_FORWARD);
    if (job_model_is_lm(&m->spec)) loss = gpt_head_forward(m, a, batch, x);
    else loss = vit_head_forward(m, a, batch, x, correct);
    model_hook_after(m, head, PHASE_FORWARD);
    return loss;
}

/* train.lora's dropout for this micro-batch (training: batch->step > 0):
 * each of the layers' rows' token number in the global batch, (sample0 +
 * its sample) x seq + its position, for the draws (lora.h). */
static void lora_batch(model *m, model_acts *a, const model_batch *batch)
{
    m->lora_step = job_lora_on(&m->spec) && m->spec.lora.dropout > 0 ? batch->step : 0;
    if (m->lora_step <= 0 || !a->bs.lora_rows) return;
    size_t N = (size_t)batch->B * (size_t)m->d.seq, seq = (size_t)model_seq_len(&m->spec);
    long long *rows = malloc(N * sizeof *rows);
    if (!rows) {
        fprintf(stderr, "dtrun: model: out of host memory for LoRA's dropout rows\n");
        abort();
    }
    for (size_t i = 0; i < N; i++) rows[i] = (long long)((size_t)batch->sample0 * seq + cp_global_row(&m->d, i));
    m->ops->from_host(a->bs.lora_rows, rows, N * sizeof *rows);
    free(rows);
}

/* Mixed precision needs no path of its own: every tensor is written in the
 * activations' type (model.act), so under bf16 each is rounded once where it
 * is written (the ops round what they store, block.c) and the blocks read the
 * stash directly. The embedding computes in fp32 (into dres, free in
 * forward) and is rounded into the stream; the residual gradient is fp32,
 * rounded to bf16 at every block boundary (what a pipeline stage sends). */
double model_forward(model *m, model_acts *a, const model_batch *batch, int *correct)
{
    int B = batch_size(a, batch);
    check_layers(m);
    lora_batch(m, a, batch);
    if (m->spec.packed) gpt_docs_from_batch(m, a, batch);
    if (correct) *correct = 0;
    size_t io = model_acts_io_numel(m, B);
    if (m->has_emb) {
        model_hook_before(m, 0, PHASE_FORWARD);
        unit_begin(m, 0, PHASE_FORWARD);
        float *e = m->act == DT_F32 ? stream_at(a, 0) : a->dres;
        if (job_model_is_lm(&m->spec)) gpt_embedding_forward(m, a, batch, e);
        else vit_embedding_forward(m, a, batch, e);
        if (m->act != DT_F32) m->ops->to_bf16(stream_at(a, 0), e, io);
        model_hook_after(m, 0, PHASE_FORWARD);
    }
    const void *x = stream_at(a, 0);
    for (int k = 0; k < m->n_blocks; k++) {
        int u = m->first_block + k;
        model_hook_before(m, u, PHASE_FORWARD);
        unit_begin(m, u, PHASE_FORWARD);
        block_acts w = acts_of_block(a, k);
        void *y = stream_dst(a, k + 1);
        block_forward(m, u, x, y, &w, &a->bs, B, 0);
        stream_keep(a, k + 1, y, io);
        model_hook_after(m, u, PHASE_FORWARD);
        x = y;
    }
    copies_finish(a);
    double loss = 0;
    if (m->has_head) loss = head_forward(m, a, batch, stream_at(a, m->n_blocks), correct);
    return loss;
}

/* Backward in reverse unit order. One exception to "after(u) right after u's
 * backward": when this object holds both wte (unit 0) and the GPT head's tied
 * copy, the head's after(BACKWARD) waits until the embedding's backward is done,
 * because the embedding's part of the wte gradient is added to the head's copy
 * too (and the head's part to unit 0's): both copies then carry the full tied
 * gradient every micro-batch, and the optimizer keeps them equal. The hooks stay
 * nested: before(L+1) ... before(0) after(0) after(L+1). */
static void backward(model *m, model_acts *a, const model_batch *batch, float loss_scale, int split)
{
    const dt_ops *ops = m->ops;
    int B = batch->B, L = m->spec.n_layer, r16 = m->act == DT_BF16;
    size_t io = model_acts_io_numel(m, B);
    int tied_here = a->tied_dwte != NULL;
    lora_batch(m, a, batch);
    /* an MoE block's balance loss: a sample's aux_loss_coef * aux of the mean
     * over the global batch's samples, which loss_scale (1 / its tokens)
     * times seq makes */
    m->moe_aux_scale = (float)(m->spec.moe.aux_loss_coef * (double)loss_scale * (double)model_seq_len(&m->spec));
    stream_prefetch(a, m->n_blocks - 1, io); /* travels during the head's backward */
    if (m->has_head) {
        model_hook_before(m, L + 1, PHASE_BACKWARD);
        unit_begin(m, L + 1, PHASE_BACKWARD);
        const void *x = stream_at(a, m->n_blocks);
        if (job_model_is_lm(&m->spec)) gpt_head_backward(m, a, batch, x, a->dres, loss_scale);
        else vit_head_backward(m, a, batch, x, a->dres, loss_scale);
        if (r16) ops->round_bf16(a->dres, io);
        /* tied: the embedding adds to the head's wte later, straight into its
         * gradients (gpt_tied_grads_finish) */
        unit_grads_end(m, L + 1);
        if (!tied_here && !split) model_hook_after(m, L + 1, PHASE_BACKWARD);
    } else if (r16) {
        ops->from_bf16(a->dres, a->doutput, io);
    } else {
        ops->copy(a->dres, a->doutput, io * sizeof(float));
    }
    for (int k = m->n_blocks - 1; k >= 0; k--) {
        int u = m->first_block + k;
        block_acts ba = acts_of_block(a, k);
        model_hook_before(m, u, PHASE_BACKWARD);
        unit_begin(m, u, PHASE_BACKWARD);
        const void *x = stream_get(a, k);
        stream_prefetch(a, k - 1, io); /* travels during this block's backward */
        if (m->recompute == RECOMPUTE_BLOCK) block_forward(m, u, x, NULL, &ba, &a->bs, B, 1);
        block_backward(m, u, a->dres, x, &ba, &a->bs, B, split ? &a->wk[k] : NULL);
        if (r16) ops->round_bf16(a->dres, io);
        unit_grads_end(m, u);
        if (!split) model_hook_after(m, u, PHASE_BACKWARD);
    }
    if (m->has_emb) embedding_backward(m, a, B, tied_here, split);
    else if (r16) ops->to_bf16(a->dinput, a->dres, io);
    if (tied_here && !split) model_hook_after(m, L + 1, PHASE_BACKWARD);
}

void model_backward(model *m, model_acts *a, const model_batch *batch, float loss_scale)
{
    batch_size(a, batch);
    check_layers(m);
    backward(m, a, batch, loss_scale, 0);
}

static void check_split(const model_acts *a, const char *what)
{
    if (a->wk || a->m->n_blocks == 0) return;
    fprintf(stderr, "dtrun: model: %s on activations not made by model_acts_create_split\n", what);
    abort();
}

void model_backward_input(model *m, model_acts *a, const model_batch *batch, float loss_scale)
{
    batch_size(a, batch);
    check_layers(m);
    check_split(a, "model_backward_input");
    backward(m, a, batch, loss_scale, 1);
}

/* The hooks' order is model_backward's: head (unless tied here), blocks
 * descending, embedding, tied head; only now are the units' gradients whole. */
void model_backward_weight(model *m, model_acts *a, const model_batch *batch)
{
    int B = batch_size(a, batch), L = m->spec.n_layer;
    int tied_here = a->tied_dwte != NULL;
    check_split(a, "model_backward_weight");
    if (m->has_head && !tied_here) model_hook_after(m, L + 1, PHASE_BACKWARD);
    for (int k = m->n_blocks - 1; k >= 0; k--) {
        int u = m->first_block + k;
        block_acts w = acts_of_block(a, k);
        unit_grads_begin(m, u);
        block_backward_weight(m, u, &w, &a->wk[k], &a->bs, B);
        unit_grads_end(m, u);
        model_hook_after(m, u, PHASE_BACKWARD);
    }
    if (m->has_emb) model_hook_after(m, 0, PHASE_BACKWARD);
    if (tied_here) model_hook_after(m, L + 1, PHASE_BACKWARD);
}
