/* jobspec_check.h — the checks of a filled job, shared by job_validate (after
 * command-line overrides) and the loader (which adds the file position of the
 * key to blame). */
#ifndef DTRUN_JOBSPEC_CHECK_H
#define DTRUN_JOBSPEC_CHECK_H

#include <stddef.h>
#include "lib/job/jobspec.h"

#define JOB_BLAME_MAX 4

/* 0 when every value is in range and the combination is consistent. Else -1,
 * one line in msg (no file name, no position) and in blame up to JOB_BLAME_MAX
 * field ids (job_fid) of the keys to point at, likeliest culprit first,
 * terminated by -1 when fewer. */
int job_check(const job_spec *job, int blame[JOB_BLAME_MAX], char *msg, size_t n);

/* jobspec_where.c. The position of the key to blame (job->where): the first of
 * blame[0..n) (-1 ends it) that the file gave, else the preset for a model key,
 * else the section; line 0 when none. */
job_pos job_where_blame(const job_spec *job, const int *blame, int n);
/* "FILE:LINE:COL: msg" (or "FILE: msg") into err; returns -1. */
int job_fail_blame(const job_spec *job, const int *blame, int n, const char *msg, char *err, size_t errlen);

#endif
