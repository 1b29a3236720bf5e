/* jobspec_where.c — file positions kept with a loaded job (job_spec.where), so
 * that a rule checked after loading still points at the key to blame, in the
 * same order the loader uses: the first blamed key the file gave; failing that,
 * the preset that set a model shape; failing that, the key's section. */
#include <stdio.h>
#include <string.h>

#include "lib/job/jobspec_check.h"
#include "lib/job/jobspec_fields.h"
#include "lib/job/jobspec_loader.h"

_Static_assert(FID_COUNT <= JOB_KEY_SLOTS, "job_where has a slot for every key");
_Static_assert(SEC_COUNT <= JOB_SECTION_SLOTS, "job_where has a slot for every section");

void loader_record_where(loader *L)
{
    job_where *w = &L->job->where;
    memset(w, 0, sizeof *w);
    for (int f = 0; f < FID_COUNT; f++)
        if (L->e[f].given && !L->e[f].override) w->key[f] = (job_pos){L->e[f].key_at.line, L->e[f].key_at.col};
    for (int s = 0; s < SEC_COUNT; s++)
        if (L->section_given[s]) w->section[s] = (job_pos){L->section_at[s].line, L->section_at[s].col};
}

job_pos job_where_blame(const job_spec *job, const int *blame, int n)
{
    const job_where *w = &job->where;
    for (int i = 0; i < n && blame[i] >= 0; i++)
        if (blame[i] < FID_COUNT && w->key[blame[i]].line > 0) return w->key[blame[i]];
    for (int i = 0; i < n && blame[i] >= 0; i++)
        if (blame[i] < FID_COUNT && job_fields[blame[i]].section == SEC_MODEL && w->key[FID_MODEL_PRESET].line > 0)
            return w->key[FID_MODEL_PRESET];
    for (int i = 0; i < n && blame[i] >= 0; i++)
        if (blame[i] < FID_COUNT && w->section[job_fields[blame[i]].section].line > 0)
            return w->section[job_fields[blame[i]].section];
    return (job_pos){0, 0};
}

int job_fail_blame(const job_spec *job, const int *blame, int n, const char *msg, char *err, size_t errlen)
{
    const char *path = memchr(job->path, 0, sizeof job->path) && job->path[0] ? job->path : "job";
    job_pos at = job_where_blame(job, blame, n);
    if (!errlen) return -1;
    if (at.line > 0) snprintf(err, errlen, "%s:%d:%d: %s", path, at.line, at.col, msg);
    else snprintf(err, errlen, "%s: %s", path, msg);
    return -1;
}
