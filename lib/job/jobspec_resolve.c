/* jobspec_resolve.c — from collected keys to a whole job: defaults, then
 * model.preset (or model.kind's tiny shape), then every other key in file
 * order, then the values the file may leave out (d_ff, min_lr, micro_batch,
 * grad_accum, microbatches ...), then job_check(), whose complaint is pinned
 * to the key it blames. model.init_from's config.json fills the shape keys
 * before the derived values follow them (jobspec_init_from.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/job/jobspec_check.h"
#include "lib/job/jobspec_loader.h"
#include "lib/job/jobspec_lora.h"
#include "lib/job/jobspec_presets.h"
#include "lib/util/suggest.h"

/* ----------------------------------------------------------- resolving */

static int resolve_model_base(loader *L, int *preset_d_ff)
{
    job_spec *job = L->job;
    const job_preset *p = NULL;
    if (L->e[FID_MODEL_PRESET].given) {
        if (loader_store_value(L, FID_MODEL_PRESET)) return -1;
        const char *name = job->model.preset;
        p = job_preset_find(name);
        if (!p) {
            char shown[256];
            job_text_show(shown, sizeof shown, name, strlen(name));
            suggest near;
            suggest_init(&near, name, strlen(name));
            for (int i = 0; job_preset_at(i); i++) suggest_offer(&near, job_preset_at(i)->name, job_preset_at(i)->name);
            if (suggest_best(&near))
                return loader_fail_value(L, FID_MODEL_PRESET, "model.preset: unknown preset '%s'; did you mean '%s'?",
                                         shown, suggest_best(&near));
            char list[512];
            size_t used = 0;
            for (int i = 0; job_preset_at(i) && used < sizeof list; i++)
                used += (size_t)snprintf(list + used, sizeof list - used, "%s%s", i ? ", " : "",
                                         job_preset_at(i)->name);
            return loader_fail_value(L, FID_MODEL_PRESET, "model.preset: unknown preset '%s' (presets: %s)", shown, list);
        }
    }
    if (L->e[FID_MODEL_KIND].given) {
        if (loader_store_value(L, FID_MODEL_KIND)) return -1;
        if (p && p->kind != job->model.kind)
            return loader_fail_value(L, FID_MODEL_KIND, "model.kind is %s but preset '%s' is a %s model",
                                     job_model_kind_name(job->model.kind), p->name, job_model_kind_name(p->kind));
    }
    if (!p) p = job_preset_tiny(job->model.kind);
    job_preset_apply(p, &job->model);
    *preset_d_ff = p->d_ff;
    return 0;
}

/* lr / 10, rounded to 15 significant digits: 6e-4 / 10 is 5.9999999999999995e-05
 * in binary, and --print-config should show the 6e-05 a person would write. */
double job_lr_tenth(double lr)
{
    char buf[40];
    snprintf(buf, sizeof buf, "%.15g", lr / 10);
    return strtod(buf, NULL);
}

/* Values the file may leave out that follow from others. */
static int derive(loader *L, int preset_d_ff)
{
    job_spec *job = L->job;
    job_model *m = &job->model;
    job_train *t = &job->train;
    job_parallel *par = &job->parallel;
    char msg[512];

    if (!L->e[FID_D_FF].given) m->d_ff = preset_d_ff ? preset_d_ff : 4 * m->d_model;
    if (L->section_given[SEC_MOE] && m->moe.experts < 1) {
        if (L->e[FID_MOE_EXPERTS].given)
            return loader_fail_value(L, FID_MOE_EXPERTS, "model.moe.experts must be >= 1 (the routed experts of each "
                                                         "MoE block), got %d", m->moe.experts);
        return loader_fail_at(L, L->section_at[SEC_MOE], "model.moe needs experts (the routed experts of each MoE "
                                                         "block, e.g. experts: 8)");
    }
    if (L->section_given[SEC_MLA] && !job_model_mla(m))
        return loader_fail_at(L, L->section_at[SEC_MLA], "model.mla needs kv_lora_rank (the keys' and values' "
                                                         "latent width, e.g. kv_lora_rank: 512)");
    /* a mixture-of-experts preset names its experts' width */
    if (!L->e[FID_MOE_D_FF_EXPERT].given && !(m->moe.experts > 0 && m->moe.d_ff_expert > 0))
        m->moe.d_ff_expert = m->moe.experts > 0 ? m->d_ff : 0;
    /* llama: the positions it takes are the training sequence's unless the
     * job (or init_from's max_position_embeddings) says more */
    if (m->kind == MODEL_LLAMA && m->max_positions == 0) m->max_positions = m->seq_len;
    if (!L->e[FID_MIN_LR].given) t->min_lr = job_lr_tenth(t->lr);
    m->packed = job->data.kind == DATA_SFT;
    if (!L->e[FID_SYNTHETIC_SIZE].given)
        job->data.synthetic_size = job_model_is_lm(m) ? SYNTHETIC_GPT_TOKENS : SYNTHETIC_VIT_IMAGES;
    if (!L->e[FID_GRAD_DTYPE].given || t->grad_dtype == DTYPE_AUTO)
        t->grad_dtype = t->precision == PREC_BF16 ? DTYPE_BF16 : DTYPE_FP32;
    if (!L->e[FID_REDUCE_DTYPE].given || par->reduce_dtype == DTYPE_AUTO) par->reduce_dtype = t->grad_dtype;
    if (!L->e[FID_VIRTUAL_STAGES].given) par->virtual_stages = par->pp_schedule == PP_INTERLEAVED ? 2 : 1;

    if (par->dp_auto && !L->e[FID_MICRO_BATCH].given)
        return loader_fail_key(L, FID_DP, "parallel.dp: auto needs train.micro_batch (the samples per rank per micro-step): "
                                   "dp is known only when the workers start, and the global batch stays the same");
    if (par->dp_auto && L->e[FID_MICROBATCHES].given)
        return loader_fail_key(L, FID_MICROBATCHES, "parallel.microbatches cannot be set with dp: auto (it is derived: "
                                             "global_batch / (micro_batch x dp) once dp is known)");
    if (!L->e[FID_MICRO_BATCH].given) {
        if (L->e[FID_MICROBATCHES].given) {
            long long per = (long long)par->dp * par->microbatches;
            if (t->global_batch % per) {
                snprintf(msg, sizeof msg,
                         "train.global_batch %d is not divisible by dp %d x microbatches %d, so micro_batch cannot "
                         "be derived",
                         t->global_batch, par->dp, par->microbatches);
                return loader_fail_blame(L, (const int[]){FID_MICROBATCHES, FID_GLOBAL_BATCH, FID_DP}, 3, msg);
            }
            t->micro_batch = (int)(t->global_batch / per);
        } else {
            if (t->global_batch % par->dp) {
                snprintf(msg, sizeof msg,
                         "train.global_batch %d is not divisible by parallel.dp %d (each data-parallel rank takes an "
                         "equal share)",
                         t->global_batch, par->dp);
                return loader_fail_blame(L, (const int[]){FID_DP, FID_GLOBAL_BATCH}, 2, msg);
            }
            t->micro_batch = t->global_batch / par->dp;
        }
    }
    long long per_step = (long long)t->micro_batch * par->dp;
    t->grad_accum = (int)(t->global_batch / per_step); /* job_check reports a remainder */
    if (!L->e[FID_MICROBATCHES].given) par->microbatches = t->grad_accum > 0 ? t->grad_accum : 1;
    return 0;
}

int loader_resolve(loader *L)
{
    job_spec *job = L->job;
    int preset_d_ff = 0;
    if (resolve_model_base(L, &preset_d_ff)) return -1;
    for (int i = 0; i < L->n_order; i++) {
        int fid = L->order[i];
        if (fid == FID_MODEL_PRESET || fid == FID_MODEL_KIND) continue;
        if (!job_field_applies(job, fid)) {
            char name[64];
            job_field_full_name(fid, name, sizeof name);
            return loader_fail_key(L, fid, "%s applies to %s models only (this model is %s)", name,
                                   job_field_kinds_text(fid), job_model_kind_name(job->model.kind));
        }
        if (loader_store_value(L, fid)) return -1;
    }
    if (loader_apply_init_from(L, &preset_d_ff)) return -1;
    if (loader_derive_lora(L)) return -1;
    if (derive(L, preset_d_ff)) return -1;
    loader_record_where(L);
    int blame[JOB_BLAME_MAX];
    char msg[512];
    if (job_check(job, blame, msg, sizeof msg)) return loader_fail_blame(L, blame, JOB_BLAME_MAX, msg);
    return 0;
}

