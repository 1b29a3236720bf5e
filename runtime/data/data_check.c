/* data_check.c — the job's data files by their headers, before any worker
 * starts (data.h: data_check_files). The same checks, in the same words, as
 * the loader's open (token_shard_check, sft_shard_check, idx_check_headers), minus everything
 * that reads beyond a header: so a PNG named as token shards is one line from
 * the launcher, not one from every rank after the spawn. */
#include "runtime/data/data.h"

#include <errno.h>
#include <glob.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "lib/job/jobspec_check.h"
#include "lib/job/jobspec_fields.h"
#include "lib/text/sft_shard.h"
#include "lib/text/token_shard.h"
#include "runtime/data/source.h"

/* "FILE:LINE:COL: data.train 'VALUE': what (why)": the loader's "PATH: what"
 * behind the key that named PATH (the pattern's match when it differs). */
static int blame(const job_spec *job, int fid, const char *value, const char *path, const char *why, char *err,
                 size_t errlen)
{
    size_t n = strlen(path);
    if (!strcmp(path, value) && !strncmp(why, path, n) && !strncmp(why + n, ": ", 2)) why += n + 2;
    char name[64], msg[3 * JOB_PATH_MAX];
    job_field_full_name(fid, name, sizeof name);
    snprintf(msg, sizeof msg, "%s '%s': %s", name, value, why);
    return job_fail_blame(job, (const int[]){fid, -1}, 2, msg, err, errlen);
}

static int token_header_ok(const char *path, char *why, size_t n)
{
    token_shard_info info;
    return token_shard_check_file(path, &info, why, n);
}

/* An SFT shard's header against its size (mapped: only the header is read;
 * the loader checks the body, which it reads anyway). */
static int sft_header_ok(const char *path, char *why, size_t n)
{
    mapped_file f;
    if (mapped_file_open(&f, path, why, n) != 0) return -1;
    sft_shard_info info;
    size_t have = f.len < TOKEN_SHARD_HEADER_BYTES ? f.len : TOKEN_SHARD_HEADER_BYTES;
    int rc = sft_shard_check(f.bytes, have, f.len, path, &info, why, n);
    mapped_file_close(&f);
    return rc;
}

/* Every shard a pattern names (a glob, or one path), by its header. */
static int check_shards(const job_spec *job, int fid, const char *pattern,
                        int (*header_ok)(const char *path, char *why, size_t n), char *err, size_t errlen)
{
    glob_t g;
    if (glob(pattern, GLOB_NOCHECK, NULL, &g) != 0) return 0; /* the loader words it */
    char why[2 * JOB_PATH_MAX];
    int rc = 0;
    for (size_t i = 0; i < g.gl_pathc && rc == 0; i++)
        if (header_ok(g.gl_pathv[i], why, sizeof why) != 0)
            rc = blame(job, fid, pattern, g.gl_pathv[i], why, err, errlen);
    globfree(&g);
    return rc;
}

static int check_text(const job_spec *job, int fid, const char *path, char *err, size_t errlen)
{
    struct stat st;
    if (stat(path, &st) == 0 && S_ISREG(st.st_mode) && st.st_size == 0)
        return blame(job, fid, path, path, "empty file (no bytes to train on)", err, errlen);
    return 0;
}

static int check_idx(const job_spec *job, int fid, int labels_fid, const char *images, const char *labels,
                     char *err, size_t errlen)
{
    char why[2 * JOB_PATH_MAX];
    if (!labels[0] || idx_check_headers(images, labels, &job->model, why, sizeof why) == 0)
        return 0; /* no labels: the job's checks say so */
    /* which file: the message starts with its path */
    int is_labels = !strncmp(why, labels, strlen(labels)) && strncmp(why, images, strlen(images));
    return is_labels ? blame(job, labels_fid, labels, labels, why, err, errlen)
                     : blame(job, fid, images, images, why, err, errlen);
}

int data_check_files(const job_spec *job, char *err, size_t errlen)
{
    const job_data *d = &job->data;
    struct {
        int fid, labels_fid;
        const char *path, *labels;
    } files[] = {{FID_DATA_TRAIN, FID_DATA_TRAIN_LABELS, d->train_path, d->train_labels},
                 {FID_DATA_VAL, FID_DATA_VAL_LABELS, d->val_path, d->val_labels}};
    for (int i = 0; i < 2; i++) {
        if (!files[i].path[0]) continue;
        int rc = 0;
        switch (d->kind) {
        case DATA_TOKENS: rc = check_shards(job, files[i].fid, files[i].path, token_header_ok, err, errlen); break;
        case DATA_SFT: rc = check_shards(job, files[i].fid, files[i].path, sft_header_ok, err, errlen); break;
        case DATA_TEXT: rc = check_text(job, files[i].fid, files[i].path, err, errlen); break;
        case DATA_IDX:
            if (job->model.kind == MODEL_VIT)
                rc = check_idx(job, files[i].fid, files[i].labels_fid, files[i].path, files[i].labels, err, errlen);
            break;
        case DATA_SYNTHETIC: break;
        }
        if (rc != 0) return -1;
    }
    return 0;
}
