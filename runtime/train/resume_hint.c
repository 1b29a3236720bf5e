/* resume_hint.c — a checkpoint that would load, for a "cannot resume" line
 * (resume_hint.h). Runs on a failure path only: it lists checkpoint.dir and
 * opens step indexes, newest first, until one fits. */
#include "runtime/train/resume_hint.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "runtime/ckpt/ckpt.h"

static int by_step_desc(const void *a, const void *b)
{
    long x = *(const long *)a, y = *(const long *)b;
    return x < y ? 1 : x > y ? -1 : 0;
}

/* The step that `tried` names: a step directory's own, else DIR's latest; -1. */
static long tried_step(const char *tried)
{
    const char *base = strrchr(tried, '/');
    base = base ? base + 1 : tried;
    long s = ckpt_parse_step_dirname(base);
    if (s >= 0) return s;
    char why[256];
    return ckpt_latest_step(tried, &s, why, sizeof why) == 0 ? s : -1;
}

void resume_hint(const job_spec *job, const char *tried, int (*usable)(const char *step_dir, void *ctx),
                 void *ctx, char *out, size_t n)
{
    snprintf(out, n, "to start otherwise, set checkpoint.resume to never");
    const char *dir = job->checkpoint.dir;
    if (!dir[0]) return;
    DIR *d = opendir(dir);
    if (!d) return;
    long *steps = NULL;
    size_t count = 0, cap = 0;
    for (struct dirent *e; (e = readdir(d));) {
        long s = ckpt_parse_step_dirname(e->d_name);
        if (s < 0) continue;
        if (count == cap) {
            long *grown = realloc(steps, (cap = cap ? 2 * cap : 16) * sizeof *steps);
            if (!grown) break;
            steps = grown;
        }
        steps[count++] = s;
    }
    closedir(d);
    qsort(steps, count, sizeof *steps, by_step_desc);
    long skip = tried ? tried_step(tried) : -1;
    for (size_t i = 0; i < count; i++) {
        if (steps[i] == skip) continue;
        char name[64], path[JOB_PATH_MAX + 80], index[JOB_PATH_MAX + 96];
        struct stat st;
        ckpt_step_dirname(name, sizeof name, steps[i]);
        snprintf(path, sizeof path, "%s/%s", dir, name);
        snprintf(index, sizeof index, "%s/index.json", path);
        if (stat(index, &st) != 0 || !usable(path, ctx)) continue; /* uncommitted, or another model */
        snprintf(out, n, "to start otherwise, set checkpoint.resume to never, or to %s (the newest other "
                 "checkpoint of this model)", path);
        break;
    }
    free(steps);
}
