/* resume_diff.c — see resume_diff.h. The keys and their values come from the
 * job file's own table (lib/job/jobspec_fields.h), printed as the job file
 * spells them, so a value compares equal exactly when it would load the same. */
#include "runtime/train/resume_diff.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/job/jobspec_fields.h"

typedef enum { KIND_RUN = 0, KIND_STEPS, KIND_LAYOUT, KIND_COMPUTE, KIND_IGNORED } key_kind;

static key_kind kind_of(int fid)
{
    switch (fid) {
    /* (train.lora.init_from: a resumed run's adapters are the checkpoint's) */
    case FID_MODEL_PRESET: case FID_INIT_FROM: case FID_LORA_INIT_FROM: return KIND_IGNORED;
    case FID_ATTENTION: case FID_HEAD_CHUNK_ROWS: return KIND_COMPUTE;
    case FID_STEPS: return KIND_STEPS;
    case FID_MICRO_BATCH: return KIND_LAYOUT;
    case FID_PRECISION: case FID_GRAD_DTYPE: case FID_DEVICE: case FID_THREADS: case FID_RECOMPUTE:
    case FID_OFFLOAD: case FID_CUDA_GRAPHS: case FID_EVAL_EVERY: case FID_EVAL_BATCHES: case FID_SKIP_NONFINITE:
        return KIND_COMPUTE;
    default: break;
    }
    switch (job_fields[fid].section) {
    case SEC_MODEL: case SEC_MOE: case SEC_MLA: case SEC_DATA: case SEC_TRAIN: case SEC_LORA: return KIND_RUN;
    case SEC_PARALLEL: return KIND_LAYOUT;
    default: return KIND_IGNORED;
    }
}

/* The value as the job file spells it, into out. */
static void value_text(const job_spec *job, int fid, char *out, size_t n)
{
    out[0] = 0;
    FILE *f = fmemopen(out, n, "w");
    if (!f) return;
    job_field_print(f, job, fid);
    fclose(f);
    out[n - 1] = 0;
}

/* Appends "SEP TEXT" to buf (cut when full). */
static void append(char *buf, size_t n, const char *text)
{
    size_t used = strlen(buf);
    if (used + 1 < n) snprintf(buf + used, n - used, "%s%s", used ? ", " : "", text);
}

static int allowed(const job_spec *now, const char *allow, const char *key)
{
    return job_key_list_has(now->checkpoint.allow_changes, key) || (allow && job_key_list_has(allow, key));
}

/* train.min_lr is derived from train.lr (lr / 10) unless the job file sets
 * it: then its change is train.lr's, allowed or refused with it. */
static int is_tenth(double min_lr, double lr) { return fabs(min_lr - lr / 10) <= 1e-12 * fabs(lr); }

static int min_lr_follows_lr(const job_spec *then, const job_spec *now)
{
    return now->where.key[FID_MIN_LR].line == 0 && is_tenth(then->train.min_lr, then->train.lr) &&
           is_tenth(now->train.min_lr, now->train.lr);
}

int resume_diff_jobs(const char *saved_yaml, const job_spec *now, const char *allow, resume_diff *out, char *err,
                     size_t errlen)
{
    memset(out, 0, sizeof *out);
    if (!saved_yaml || !saved_yaml[0]) return 0;
    job_spec *then = malloc(sizeof *then);
    if (!then) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    /* model.init_from would read its config.json again: the saved job already
     * holds the shape it filled in, and a resume does not read those weights */
    static const char *const no_init_from[] = {"model.init_from="};
    char why[1024];
    if (job_load_string_overrides(then, saved_yaml, strlen(saved_yaml), "the checkpoint's job", no_init_from, 1, why,
                                  sizeof why) != 0) {
        snprintf(err, errlen, "its job does not load here (%s)", why);
        free(then);
        return -1;
    }
    for (int fid = 0; fid < FID_COUNT; fid++) {
        key_kind kind = kind_of(fid);
        if (kind == KIND_IGNORED) continue;
        if (!job_field_applies(then, fid) && !job_field_applies(now, fid)) continue;
        /* dp: auto both times: dp follows the world (the resume line says it) */
        if ((fid == FID_DP || fid == FID_MICROBATCHES) && then->parallel.dp_auto && now->parallel.dp_auto) continue;
        char a[300], b[300], key[96], line[768];
        value_text(then, fid, a, sizeof a);
        value_text(now, fid, b, sizeof b);
        if (!strcmp(a, b)) continue;
        job_field_full_name(fid, key, sizeof key);
        int follows = fid == FID_MIN_LR && min_lr_follows_lr(then, now);
        int refused = kind == KIND_RUN && !follows && !allowed(now, allow, key);
        snprintf(line, sizeof line, "%s %s -> %s%s", key, a, b,
                 follows ? " (follows train.lr)" : kind == KIND_RUN && !refused ? " (allowed)" : "");
        append(out->changed, sizeof out->changed, line);
        out->n_changed++;
        if (!refused) continue;
        snprintf(line, sizeof line, "%s %s -> %s", key, a, b);
        append(out->refused, sizeof out->refused, line);
        size_t used = strlen(out->refused_keys);
        if (used + strlen(key) + 2 < sizeof out->refused_keys)
            snprintf(out->refused_keys + used, sizeof out->refused_keys - used, "%s%s", used ? "," : "", key);
        out->n_refused++;
    }
    free(then);
    return 0;
}

void resume_diff_refusal(const resume_diff *d, const char *ckpt_path, char *out, size_t n)
{
    char yaml_list[600];
    snprintf(yaml_list, sizeof yaml_list, "%s", d->refused_keys);
    for (char *c = strchr(yaml_list, ','); c; c = strchr(c + 1, ',')) {
        /* "a,b" -> "a, b" for the YAML form */
        size_t len = strlen(c + 1);
        if ((size_t)(c - yaml_list) + len + 3 > sizeof yaml_list) break;
        memmove(c + 2, c + 1, len + 1);
        c[1] = ' ';
    }
    snprintf(out, n,
             "cannot resume from %s: %s make%s another run than the checkpoint's (--allow-changes=%s or "
             "checkpoint.allow_changes: [%s] resumes with %s; checkpoint.resume: never starts afresh)",
             ckpt_path, d->refused, d->n_refused == 1 ? "s" : "", d->refused_keys, yaml_list,
             d->n_refused == 1 ? "it" : "them");
}
