/* jobspec_paths.c — the job's files and directories, checked before any worker
 * starts (jobspec.h: job_check_paths): what a worker would otherwise find
 * missing only after the launch, with no hint of which directory a relative
 * path was taken from. */
#include <errno.h>
#include <glob.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "lib/job/jobspec.h"
#include "lib/job/jobspec_check.h"
#include "lib/job/jobspec_fields.h"

/* " (relative to /the/cwd)" for a relative path, "" for an absolute one. */
static const char *relative_note(const char *path, char *buf, size_t n)
{
    char cwd[JOB_PATH_MAX];
    if (path[0] == '/' || !getcwd(cwd, sizeof cwd)) return "";
    snprintf(buf, n, " (relative to %s, the directory dtrun runs in)", cwd);
    return buf;
}

static int path_fail(const job_spec *job, int fid, const char *path, const char *what, int code, int *exit_code,
                     char *err, size_t errlen)
{
    char name[64], note[JOB_PATH_MAX + 64], msg[3 * JOB_PATH_MAX];
    job_field_full_name(fid, name, sizeof name);
    snprintf(msg, sizeof msg, "%s '%s': %s%s", name, path, what, relative_note(path, note, sizeof note));
    *exit_code = code;
    return job_fail_blame(job, (const int[]){fid, -1}, 2, msg, err, errlen);
}

/* A file the workers read: exists, is not a directory, is readable. */
static int check_input(const job_spec *job, int fid, const char *path, int code, int *exit_code, char *err,
                       size_t errlen)
{
    struct stat st;
    if (!path[0]) return 0;
    if ((job->data.kind == DATA_TOKENS || job->data.kind == DATA_SFT) && strpbrk(path, "*?[")) { /* shards: a glob */
        glob_t g;
        int matched = glob(path, 0, NULL, &g) == 0 && g.gl_pathc > 0;
        globfree(&g);
        return matched ? 0 : path_fail(job, fid, path, "no file matches the pattern", code, exit_code, err, errlen);
    }
    if (stat(path, &st) != 0) return path_fail(job, fid, path, strerror(errno), code, exit_code, err, errlen);
    if (S_ISDIR(st.st_mode)) return path_fail(job, fid, path, "is a directory, not a file", code, exit_code, err, errlen);
    if (access(path, R_OK) != 0) return path_fail(job, fid, path, strerror(errno), code, exit_code, err, errlen);
    return 0;
}

/* Where the workers write: an existing directory (or file) they may write, or
 * a path whose nearest existing ancestor is a writable directory (the workers
 * create the rest). */
static int check_output(const job_spec *job, int fid, const char *path, int want_dir, int code, int *exit_code,
                        char *err, size_t errlen)
{
    struct stat st;
    if (!path[0]) return 0;
    if (stat(path, &st) == 0) {
        if (want_dir && !S_ISDIR(st.st_mode))
            return path_fail(job, fid, path, "exists and is not a directory", code, exit_code, err, errlen);
        if (!want_dir && S_ISDIR(st.st_mode))
            return path_fail(job, fid, path, "is a directory, not a file", code, exit_code, err, errlen);
        if (access(path, W_OK) != 0)
            return path_fail(job, fid, path, "not writable", code, exit_code, err, errlen);
        return 0;
    }
    char up[JOB_PATH_MAX];
    snprintf(up, sizeof up, "%s", path);
    for (;;) {
        char *slash = strrchr(up, '/');
        while (slash && slash > up && slash[1] == 0) { /* a trailing slash */
            *slash = 0;
            slash = strrchr(up, '/');
        }
        if (!slash) snprintf(up, sizeof up, ".");
        else if (slash == up) up[1] = 0;
        else *slash = 0;
        if (stat(up, &st) == 0) break;
        if (!strcmp(up, ".") || !strcmp(up, "/")) break;
    }
    char what[JOB_PATH_MAX + 64];
    if (!S_ISDIR(st.st_mode)) {
        snprintf(what, sizeof what, "cannot be created: '%s' is not a directory", up);
        return path_fail(job, fid, path, what, code, exit_code, err, errlen);
    }
    if (access(up, W_OK | X_OK) != 0) {
        snprintf(what, sizeof what, "cannot be created: '%s' is not writable", up);
        return path_fail(job, fid, path, what, code, exit_code, err, errlen);
    }
    return 0;
}

int job_check_paths(const job_spec *job, int *exit_code, char *err, size_t errlen)
{
    const job_data *d = &job->data;
    if (d->kind != DATA_SYNTHETIC &&
        (check_input(job, FID_DATA_TRAIN, d->train_path, DT_EXIT_DATA, exit_code, err, errlen) ||
         check_input(job, FID_DATA_TRAIN_LABELS, d->train_labels, DT_EXIT_DATA, exit_code, err, errlen) ||
         check_input(job, FID_DATA_VAL, d->val_path, DT_EXIT_DATA, exit_code, err, errlen) ||
         check_input(job, FID_DATA_VAL_LABELS, d->val_labels, DT_EXIT_DATA, exit_code, err, errlen)))
        return -1;
    const char *resume = job->checkpoint.resume;
    struct stat st;
    if (strcmp(resume, "auto") && strcmp(resume, "never") && stat(resume, &st) != 0)
        return path_fail(job, FID_CKPT_RESUME, resume, strerror(errno), DT_EXIT_CKPT, exit_code, err, errlen);
    if (check_output(job, FID_CKPT_DIR, job->checkpoint.dir, 1, DT_EXIT_CKPT, exit_code, err, errlen) ||
        check_output(job, FID_LOG_METRICS, job->log.metrics, 0, DT_EXIT_USAGE, exit_code, err, errlen) ||
        check_output(job, FID_LOG_TRACE, job->log.trace, 0, DT_EXIT_USAGE, exit_code, err, errlen))
        return -1;
    return 0;
}
