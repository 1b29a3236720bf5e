/* data_hash.h — the content hash of every data file a job reads, for a
 * checkpoint's provenance: XXH3-64 of each file, remembered by (absolute
 * path, size, mtime) in a cache file so each version of a file is read once,
 * not at every save (the cache: DTRUN_CACHE_DIR, runtime/env.h). */
#ifndef DTRUN_DATA_HASH_H
#define DTRUN_DATA_HASH_H

#include <stddef.h>
#include <stdint.h>

#include "lib/job/jobspec.h"

typedef struct {
    char path[JOB_PATH_MAX];   /* absolute */
    uint64_t size;
    long long mtime_ns;
    uint64_t xxh3;
} data_file_hash;

/* Every file of the job's data section (token globs expanded; none for
 * synthetic data), in a malloc'd array (*n of them; free it). 0, or -1 with
 * one line in err (a file that cannot be read). */
int data_hash_job(const job_spec *job, data_file_hash **out, int *n, char *err, size_t errlen);
/* One file (an absolute or relative path). */
int data_hash_file(const char *path, data_file_hash *out, char *err, size_t errlen);

#endif
