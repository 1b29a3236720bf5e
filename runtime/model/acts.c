/* acts.c — the activation buffers of one micro-batch.
 *
 * One layout function places every buffer in a single allocation; it runs once
 * without memory to size it (model_acts_bytes, which the dry-run prints) and once
 * with memory to hand out pointers (model_acts_create). So the reported size and
 * the allocated size cannot drift apart. */
#include "runtime/model/model_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ACTS_ALIGN 64 /* a cache line; also keeps SIMD loads aligned */

typedef struct {
    char *base; /* NULL while only sizing */
    size_t off;
} bump;

static void *take(bump *b, size_t bytes)
{
    size_t at = b->off;
    b->off += (bytes + ACTS_ALIGN - 1) / ACTS_ALIGN * ACTS_ALIGN;
    return b->base ? b->base + at : NULL;
}

static float *takef(bump *b, size_t n) { return take(b, n * sizeof(float)); }
static int *takei(bump *b, size_t n) { return take(b, n * sizeof(int)); }

static size_t max_sz(size_t x, size_t y) { return x > y ? x : y; }

/* Sets of block_acts: one per block, or one shared by all with block recompute
 * (each block's forward is rerun in its backward). */
static int blk_sets(int nb, recompute_kind rc) { return nb == 0 ? 0 : rc == RECOMPUTE_BLOCK ? 1 : nb; }

/* Places every buffer of a micro-batch of B samples; fills `a` when b->base is set. */
static void layout(const job_model *spec, const model_shard *sh, int B, recompute_kind rc,
                   model_acts *a, bump *b)
{
    model_dims d;
    model_dims_of(spec, sh, &d);
    int L = spec->n_layer;
    int has_emb = sh->unit_begin == 0, has_head = sh->unit_end == L + 2;
    int first = sh->unit_begin > 1 ? sh->unit_begin : 1;
    int last = sh->unit_end - 1 < L ? sh->unit_end - 1 : L;
    int nb = last >= first ? last - first + 1 : 0;
    size_t N = (size_t)B * (size_t)d.seq, C = (size_t)d.C;
    size_t Nl = (size_t)rows_local(&d, B); /* this rank's rows of the stream */
    size_t att = (size_t)B * (size_t)d.NH_l * (size_t)d.seq * (size_t)d.seq;
    size_t C_l = (size_t)d.C_l, F_l = (size_t)d.F_l;
    int sp = d.sp_size > 1, gpt = spec->kind == MODEL_GPT;

    /* the residual stream at every block boundary: kept in every mode, since
     * block recompute restarts each block from its input */
    a->stream = takef(b, (size_t)(nb + 1) * Nl * C);
    a->dres = takef(b, Nl * C);
    a->doutput = has_head ? NULL : takef(b, Nl * C);

    a->n_blk_sets = blk_sets(nb, rc);
    /* selective: one [B, NH_l, seq, seq] for all blocks instead of one each */
    if (nb > 0 && rc == RECOMPUTE_SELECTIVE) a->bs.att_shared = takef(b, att);
    for (int k = 0; k < a->n_blk_sets; k++) {
        block_acts *s = a->blk ? &a->blk[k] : &(block_acts){0};
        s->ln1 = takef(b, Nl * C);
        s->ln1_mean = takef(b, Nl);
        s->ln1_rstd = takef(b, Nl);
        s->qkv = takef(b, N * 3 * C_l);
        s->att = rc == RECOMPUTE_SELECTIVE ? a->bs.att_shared : takef(b, att);
        s->atty = takef(b, N * C_l);
        s->r2 = takef(b, Nl * C);
        s->ln2 = takef(b, Nl * C);
        s->ln2_mean = takef(b, Nl);
        s->ln2_rstd = takef(b, Nl);
        s->fch = takef(b, N * F_l);
        s->fchg = takef(b, N * F_l);
    }
    if (nb > 0 || has_head) a->bs.dln = takef(b, N * C);
    if (nb > 0) {
        a->bs.dA = takef(b, N * max_sz(F_l, 3 * C_l));
        a->bs.dB = takef(b, N * max_sz(F_l, C_l));
        a->bs.att_scratch = takef(b, att);
    }
    /* sequence parallelism: the whole [N, C] for the blocks' gathers and partial
     * sums, the embedding's output before it is cut into rows, the ViT head's
     * class tokens (the GPT head gathers into lnf); layernorm gradients of the
     * blocks (4 x C) and of the GPT head (2 x C; the ViT head's layernorm sees
     * whole class-token rows) */
    if (sp && (nb > 0 || has_emb || (has_head && !gpt))) a->bs.full = takef(b, N * C);
    if (sp && (nb > 0 || (has_head && gpt))) a->bs.ln_grads = takef(b, 4 * C);

    if (spec->kind == MODEL_GPT) {
        size_t V_l = (size_t)d.V_l;
        if (has_emb) a->tokens = takei(b, N);
        if (has_head) {
            a->targets = takei(b, N);
            a->lnf = takef(b, N * C);
            a->lnf_mean = takef(b, Nl);
            a->lnf_rstd = takef(b, Nl);
            a->logits = takef(b, N * V_l);
            a->rowmax = takef(b, N);
            a->sumexp = takef(b, N);
            a->target = takef(b, N);
            a->loss = takef(b, N);
            a->dloss = takef(b, N);
            /* the head's backward walks one sample at a time, so the logits'
             * gradient needs [seq, V_l], not another [N, V_l] */
            a->dlogits = takef(b, (size_t)d.seq * V_l);
        }
        if (has_emb && has_head) a->tied_dwte = takef(b, V_l * C);
    } else {
        size_t K = (size_t)spec->n_classes, Bs = (size_t)B;
        if (has_emb) {
            a->images = takef(b, Bs * (size_t)spec->channels * (size_t)spec->image_size *
                                     (size_t)spec->image_size);
            a->patch_out = takef(b, Bs * (size_t)d.NP * C);
            a->cls_tmp = takef(b, Bs * C);
        }
        if (has_head) {
            a->labels = takei(b, Bs);
            a->cls_x = takef(b, Bs * C);
            a->dcls_x = takef(b, Bs * C);
            a->lnf = takef(b, Bs * C);
            a->lnf_mean = takef(b, Bs);
            a->lnf_rstd = takef(b, Bs);
            a->logits = takef(b, Bs * K);
            a->rowmax = takef(b, Bs);
            a->sumexp = takef(b, Bs);
            a->target = takef(b, Bs);
            a->loss = takef(b, Bs);
            a->dloss = takef(b, Bs);
            a->dlogits = takef(b, Bs * K);
        }
    }
}

size_t model_acts_bytes(const job_model *spec, const model_shard *shard, int B,
                        recompute_kind recompute)
{
    model_acts sizing;
    memset(&sizing, 0, sizeof sizing);
    bump b = {NULL, 0};
    layout(spec, shard, B, recompute, &sizing, &b);
    return b.off;
}

size_t model_acts_host_bytes(const job_model *spec, int B)
{
    size_t N = (size_t)B * (size_t)model_seq_len(spec);
    size_t floats = 2 * N + (spec->kind == MODEL_VIT ? (size_t)B * (size_t)spec->n_classes : 0);
    return floats * sizeof(float);
}

model_acts *model_acts_create(model *m, int B)
{
    if (B < 1) return NULL;
    model_acts *a = calloc(1, sizeof *a);
    if (!a) return NULL;
    a->m = m;
    a->B = B;
    a->bytes = model_acts_bytes(&m->spec, &m->shard, B, m->recompute);
    size_t N = (size_t)B * (size_t)m->d.seq;
    int sets = blk_sets(m->n_blocks, m->recompute);
    a->blk = sets ? calloc((size_t)sets, sizeof(block_acts)) : NULL;
    a->mem = m->ops->alloc(a->bytes);
    a->host_loss = malloc(N * sizeof(float));
    a->host_dloss = malloc(N * sizeof(float));
    if (m->spec.kind == MODEL_VIT)
        a->host_logits = malloc((size_t)B * (size_t)m->spec.n_classes * sizeof(float));
    if (!a->mem || (sets && !a->blk) || !a->host_loss || !a->host_dloss ||
        (m->spec.kind == MODEL_VIT && !a->host_logits)) {
        fprintf(stderr, "dtrun: model: out of memory for %zu bytes of activations\n", a->bytes);
        model_acts_destroy(a);
        return NULL;
    }
    bump b = {a->mem, 0};
    layout(&m->spec, &m->shard, B, m->recompute, a, &b);
    return a;
}

void model_acts_destroy(model_acts *a)
{
    if (!a) return;
    if (a->mem) a->m->ops->free(a->mem);
    free(a->blk);
    free(a->host_loss);
    free(a->host_dloss);
    free(a->host_logits);
    free(a);
}

float *model_acts_input(model_acts *a) { return a->stream; }

float *model_acts_output(model_acts *a)
{
    return a->stream + (size_t)a->m->n_blocks * model_acts_io_numel(a->m, a->B);
}

float *model_acts_dinput(model_acts *a) { return a->dres; }
float *model_acts_doutput(model_acts *a) { return a->doutput; }

size_t model_acts_io_numel(const model *m, int B)
{
    return (size_t)rows_local(&m->d, B) * (size_t)m->d.C;
}
