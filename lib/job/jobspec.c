/* jobspec.c — load a job file: YAML (libyaml's document API) -> job_spec.
 *
 * Three passes, so that the result does not depend on the order of keys:
 *  1. collect: walk the two levels (section -> key -> scalar), rejecting unknown
 *     names, duplicates and wrong shapes, and remember each key's value and the
 *     file positions of the key and of the value;
 *  2. resolve: defaults, then model.preset (or model.kind's tiny shape), then
 *     every other key in file order, each parsed strictly into its field;
 *  3. derive and check: d_ff, micro_batch, grad_accum, microbatches, min_lr ...
 *     then job_check(), whose complaint is pinned to the line of the key it
 *     blames.
 * Every failure is one line "FILE:LINE:COL: what (why)[; did you mean 'x'?]".
 * The passes live in their files (lib/job/jobspec_loader.h lists them); this
 * one holds the entry points of jobspec.h, the defaults and reading the file. */
#include "lib/job/jobspec.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/job/jobspec_check.h"
#include "lib/job/jobspec_loader.h"
#include "lib/job/jobspec_presets.h"

/* A job file is a page of YAML; anything bigger is a mistake (a data file
 * passed by accident), refused before libyaml spends time on it. */
#define JOB_FILE_MAX (1 << 20)

/* The error must stay one line even when a file name holds a newline. */
static void one_line(char *err, size_t errlen)
{
    for (size_t i = 0; i < errlen && err[i]; i++)
        if ((unsigned char)err[i] < 0x20 || err[i] == 0x7f) err[i] = '?';
}


void job_defaults(job_spec *job)
{
    memset(job, 0, sizeof *job);
    job_preset_apply(job_preset_find("gpt-tiny"), &job->model);

    job->model.activation = ACT_GELU_TANH;
    job->model.norm_eps = JOB_NORM_EPS_DEFAULT;
    /* model.moe's defaults, used once the file gives experts */
    job->model.moe.top_k = 2;
    job->model.moe.every = 1;
    job->model.moe.router = ROUTER_SOFTMAX;
    job->model.moe.norm_top_k = 1;
    job->model.moe.aux_loss_coef = 0.01;
    /* model.mla's, used once the file gives kv_lora_rank */
    job->model.mla.qk_rope_head_dim = 64;
    job->model.mla.qk_nope_head_dim = 128;
    job->model.mla.v_head_dim = 128;
    job->data.kind = DATA_SYNTHETIC;
    job->data.val_fraction = 0.1;
    job->data.synthetic_size = SYNTHETIC_GPT_TOKENS;

    job_train *t = &job->train;
    t->steps = 20;
    t->global_batch = 8;
    t->micro_batch = 8;
    t->grad_accum = 1;
    t->lr = 1e-3;
    t->min_lr = job_lr_tenth(t->lr);
    t->warmup = 0;
    t->schedule = LR_COSINE;
    t->weight_decay = 0.0;
    t->beta1 = 0.9;
    t->beta2 = 0.95;
    t->eps = 1e-8;
    t->grad_clip = 1.0;
    t->precision = PREC_FP32;
    t->grad_dtype = DTYPE_FP32; /* follows precision unless given */
    t->device = DEVICE_AUTO;
    t->seed = 1337;
    t->recompute = RECOMPUTE_NONE;
    t->eval_every = 0;
    t->eval_batches = 4;
    t->threads = 0;
    t->skip_nonfinite = 0;
    t->cuda_graphs = 0;

    job_parallel *p = &job->parallel;
    p->dp = p->tp = p->pp = p->cp = p->ep = 1;
    p->cp_mode = CP_RING;
    p->mode = SHARD_NONE;
    p->pp_schedule = PP_1F1B;
    p->microbatches = 1;
    p->virtual_stages = 1;
    p->sequence_parallel = 0;
    p->tp_overlap = 1;
    p->tp_split = 1;
    p->bucket_mb = 25;
    p->reduce_dtype = DTYPE_FP32; /* follows train.grad_dtype unless given */

    job->checkpoint.every = 0;
    job->checkpoint.keep = 2;
    memcpy(job->checkpoint.resume, "auto", 5);

    job->log.every = 1;
    job->log.progress = PROGRESS_AUTO;

    job->launch.max_restarts = -1;
}

int job_load_string_overrides(job_spec *job, const char *text, size_t len, const char *name,
                              const char *const *overrides, int n_overrides, char *err, size_t errlen)
{
    static loader zero;
    loader *L = malloc(sizeof *L); /* ~10 KiB: kept off small thread stacks */
    if (!L) {
        if (errlen) snprintf(err, errlen, "%s: out of memory", name);
        return -1;
    }
    *L = zero;
    L->job = job;
    L->name = name;
    L->err = err;
    L->errlen = errlen;
    if (errlen) err[0] = 0;
    job_defaults(job);
    size_t nlen = strlen(name);
    memcpy(job->path, name, nlen < JOB_PATH_MAX ? nlen : JOB_PATH_MAX - 1);
    int rc = 0;
    if (len > JOB_FILE_MAX)
        rc = loader_fail_at(L, (pos){0, 0}, "too large for a job file (%zu bytes, at most %d)", len, JOB_FILE_MAX);
    else
        rc = loader_load(L, text ? text : "", text ? len : 0, overrides, n_overrides);
    free(L);
    if (rc && errlen) one_line(err, errlen);
    return rc;
}

int job_load_string(job_spec *job, const char *text, size_t len, const char *name, char *err, size_t errlen)
{
    return job_load_string_overrides(job, text, len, name, NULL, 0, err, errlen);
}

int job_load_file_overrides(job_spec *job, const char *path, const char *const *overrides, int n_overrides,
                            char *err, size_t errlen)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        if (errlen) snprintf(err, errlen, "%s: cannot open (%s)", path, strerror(errno));
        if (errlen) one_line(err, errlen);
        return -1;
    }
    /* Read to EOF rather than trusting st_size, so pipes and /dev/stdin work. */
    size_t cap = 4096, len = 0;
    char *buf = malloc(cap);
    int rc = 0;
    while (buf) {
        if (len == cap) {
            if (cap > JOB_FILE_MAX) break;
            char *bigger = realloc(buf, cap * 2);
            if (!bigger) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = bigger;
            cap *= 2;
        }
        size_t got = fread(buf + len, 1, cap - len, f);
        len += got;
        if (got == 0) break;
    }
    if (!buf) {
        if (errlen) snprintf(err, errlen, "%s: out of memory reading the job file", path);
        rc = -1;
    } else if (ferror(f)) {
        if (errlen) snprintf(err, errlen, "%s: cannot read (%s)", path, strerror(errno));
        rc = -1;
    } else if (len > JOB_FILE_MAX) {
        if (errlen) snprintf(err, errlen, "%s: too large for a job file (more than %d bytes)", path, JOB_FILE_MAX);
        rc = -1;
    }
    fclose(f);
    if (rc == 0) rc = job_load_string_overrides(job, buf, len, path, overrides, n_overrides, err, errlen);
    free(buf);
    if (rc && errlen) one_line(err, errlen);
    return rc;
}

int job_load_file(job_spec *job, const char *path, char *err, size_t errlen)
{
    return job_load_file_overrides(job, path, NULL, 0, err, errlen);
}

int job_resolve_world(job_spec *job, int world, char *err, size_t errlen)
{
    job_parallel *par = &job->parallel;
    job_train *t = &job->train;
    if (!par->dp_auto) return 0;
    int tp_pp = par->tp * par->pp * par->cp;
    char msg[512];
    if (world < 1 || world % tp_pp) {
        snprintf(msg, sizeof msg, "parallel.dp: auto: the world of %d workers is not a multiple of tp x pp%s = %d",
                 world, par->cp > 1 ? " x cp" : "", tp_pp);
        return job_fail_blame(job, (const int[]){FID_DP, FID_TP, FID_PP, FID_CP, -1}, 5, msg, err, errlen);
    }
    par->dp = world / tp_pp;
    long long per_step = (long long)t->micro_batch * par->dp;
    if (t->global_batch % per_step) {
        snprintf(msg, sizeof msg, "parallel.dp: auto: train.global_batch %d is not divisible by micro_batch %d x dp %d "
                                  "(dp = %d workers / (tp x pp))",
                 t->global_batch, t->micro_batch, par->dp, world);
        return job_fail_blame(job, (const int[]){FID_DP, FID_GLOBAL_BATCH, FID_MICRO_BATCH, -1}, 4, msg, err, errlen);
    }
    t->grad_accum = (int)(t->global_batch / per_step);
    par->microbatches = t->grad_accum;
    return job_validate(job, err, errlen);
}

