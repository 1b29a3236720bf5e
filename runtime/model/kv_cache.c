/* kv_cache.c — the KV cache of decoding (model.h) and the one-row buffers a
 * decoding step computes in. */
#include "runtime/model/kv_cache.h"

#include <stdlib.h>

/* An MoE block's buffers for one row (moe.c's moe_bufs): k choices. */
static int moe_rows(model *m, model_kv *kv)
{
    const model_dims *d = &m->d;
    size_t E = (size_t)d->E, k = (size_t)d->k, C = (size_t)d->C;
    size_t floats = E + k + k * (C + (size_t)d->He + (size_t)d->Fe + C), ints = 3 * k + 2 * E;
    float *p = m->ops->alloc(floats * sizeof(float) + ints * sizeof(int));
    kv->moe_host = malloc((3 * E + E + E) * sizeof(int));
    kv->moe_mem = p;
    if (!p || !kv->moe_host) return -1;
    moe_bufs *b = &kv->moe;
    b->scores = p, p += E;
    b->w = p, p += k;
    b->xe = p, p += k * C;
    b->h = p, p += k * (size_t)d->He;
    b->g = p, p += k * (size_t)d->Fe;
    b->y = p, p += k * C;
    int *q = (int *)p;
    b->idx = q, q += k;
    b->dst = q, q += k;
    b->src = q, q += k;
    b->counts_dev = q, q += E;
    b->chosen_dev = q;
    b->counts = kv->moe_host;
    b->chosen = kv->moe_host + 3 * E;
    b->host = (float *)(kv->moe_host + 4 * E);
    b->sh_h = kv->fch;
    b->sh_g = kv->fchg;
    return 0;
}

model_kv *model_kv_create(model *m, int T_max)
{
    const model_dims *d = &m->d;
    if (!job_model_is_lm(&m->spec) || m->prec.bf16 || d->sp_size != 1 || d->cp_size != 1 || T_max < 1 ||
        T_max > job_model_max_positions(&m->spec))
        return NULL;
    model_kv *kv = calloc(1, sizeof *kv);
    if (!kv) return NULL;
    kv->m = m;
    kv->cap = T_max;
    kv->n_blocks = m->n_blocks;
    int llama = m->spec.kind == MODEL_LLAMA && m->n_blocks > 0;
    size_t C = (size_t)d->C, Wl = (size_t)d->W_l, Hl = (size_t)d->H_l, Fl = (size_t)d->F_l;
    if ((size_t)d->Hs > Hl) Hl = (size_t)d->Hs, Fl = (size_t)d->Fs; /* an MoE block's shared experts */
    size_t rope = llama ? (size_t)T_max * (size_t)d->hs : 0;
    /* one allocation: the caches (k and v only: ops.h attention_decode), then the step's rows */
    size_t per_block = (size_t)T_max * (size_t)dt_kv_cols(d->C_l, d->NH_l, d->NKV_l);
    /* train.lora: an adapted layer's sum [max OC] and one target's delta, h [r] */
    size_t wide = Wl > Hl ? Wl : Hl, lora = job_lora_on(&m->spec) ? 2 * (wide > C ? wide : C) + 2 * (size_t)m->spec.lora.rank : 0;
    size_t n = per_block * (size_t)m->n_blocks + rope + Wl + 6 * C + (size_t)d->C_l + Hl + Fl + 4 +
               (size_t)d->NH_l * (size_t)T_max + lora;
    kv->bytes = n * sizeof(float) + 2 * sizeof(int);
    float *p = m->ops->alloc(kv->bytes);
    if (!p) {
        free(kv);
        return NULL;
    }
    m->ops->zero(p, kv->bytes);
    kv->mem = p;
    kv->cache = calloc((size_t)m->n_blocks + 1, sizeof *kv->cache);
    if (!kv->cache) {
        model_kv_destroy(kv);
        return NULL;
    }
    for (int b = 0; b < m->n_blocks; b++, p += per_block) kv->cache[b] = p;
    kv->rope_cs = llama ? p : NULL, p += rope;
    kv->qkv = p, p += Wl;
    kv->x = p, p += C;
    kv->y = p, p += C;
    kv->ln = p, p += C;
    kv->r2 = p, p += C;
    kv->lnf = p, p += C;
    kv->spare = p, p += C;
    kv->atty = p, p += d->C_l;
    kv->fch = p, p += Hl;
    kv->fchg = p, p += Fl;
    kv->mean = p, p += 2;
    kv->rstd = p, p += 2;
    kv->scratch = p, p += (size_t)d->NH_l * (size_t)T_max;
    if (lora) {
        size_t o = lora / 2 - (size_t)m->spec.lora.rank; /* the widest OC */
        kv->lora.y = p, p += o;
        kv->lora.dt = p, p += o;
        kv->lora.h32 = p, p += (size_t)m->spec.lora.rank;
        kv->lora.dh = p, p += (size_t)m->spec.lora.rank;
    }
    kv->tok = (int *)p;
    kv->pos = kv->tok + 1;
    if (llama) m->ops->rope_table(kv->rope_cs, T_max, d->hs, (float)job_model_rope_theta(&m->spec));
    if (m->n_moe > 0 && moe_rows(m, kv) != 0) {
        model_kv_destroy(kv);
        return NULL;
    }
    return kv;
}

void model_kv_destroy(model_kv *kv)
{
    if (!kv) return;
    if (kv->mem) kv->m->ops->free(kv->mem);
    if (kv->moe_mem) kv->m->ops->free(kv->moe_mem);
    free(kv->moe_host);
    free(kv->cache);
    free(kv);
}

int model_kv_len(const model_kv *kv) { return kv->len; }
int model_kv_capacity(const model_kv *kv) { return kv->cap; }
