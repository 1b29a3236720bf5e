/* data_hash.c — see data_hash.h. The cache is a text file of lines
 * "SIZE MTIME_NS XXH3 PATH", appended to; a later line for the same key wins,
 * and a line that does not parse is skipped (a cache is never an error). */
#include "runtime/data/data_hash.h"

#include <glob.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>

#include "lib/util/file_hash.h"
#include "runtime/env.h"

static int cache_path(char *out, size_t n)
{
    const char *d = dt_env_get()->cache_dir;
    if (!d[0]) return -1;
    char dir[PATH_MAX];
    snprintf(dir, sizeof dir, "%s", d);
    /* make the directory and its parent (~/.cache may not exist yet) */
    char *slash = strrchr(dir, '/');
    if (slash && slash != dir) {
        *slash = 0;
        mkdir(dir, 0755);
        *slash = '/';
    }
    mkdir(dir, 0755);
    return snprintf(out, n, "%s/data-hashes.tsv", dir) < (int)n ? 0 : -1;
}

static int cache_lookup(const char *cache, data_file_hash *f)
{
    FILE *fp = fopen(cache, "r");
    if (!fp) return -1;
    char line[JOB_PATH_MAX + 96];
    int found = -1;
    while (fgets(line, sizeof line, fp)) {
        unsigned long long size, hash;
        long long mt;
        int at = 0;
        if (sscanf(line, "%llu %lld %llx %n", &size, &mt, &hash, &at) != 3 || !at) continue;
        char *p = line + at;
        p[strcspn(p, "\n")] = 0;
        if (size == f->size && mt == f->mtime_ns && strcmp(p, f->path) == 0) {
            f->xxh3 = hash;
            found = 0;
        }
    }
    fclose(fp);
    return found;
}

static void cache_add(const char *cache, const data_file_hash *f)
{
    FILE *fp = fopen(cache, "a");
    if (!fp) return;
    flock(fileno(fp), LOCK_EX); /* ranks of other jobs may append at once */
    fprintf(fp, "%" PRIu64 " %lld %016" PRIx64 " %s\n", f->size, f->mtime_ns, f->xxh3, f->path);
    fclose(fp);
}

int data_hash_file(const char *path, data_file_hash *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    struct stat st;
    if (!realpath(path, out->path) || stat(out->path, &st) != 0) {
        snprintf(err, errlen, "%s: cannot hash the data file (it cannot be found)", path);
        return -1;
    }
    out->size = (uint64_t)st.st_size;
    out->mtime_ns = (long long)st.st_mtim.tv_sec * 1000000000LL + st.st_mtim.tv_nsec;
    char cache[PATH_MAX + 32];
    int have_cache = cache_path(cache, sizeof cache) == 0;
    if (have_cache && cache_lookup(cache, out) == 0) return 0;
    uint64_t size;
    if (file_xxh3(out->path, &size, &out->xxh3, err, errlen) != 0) return -1;
    if (have_cache && size == out->size) cache_add(cache, out);
    return 0;
}

static int add(data_file_hash **v, int *n, const char *path, char *err, size_t errlen)
{
    data_file_hash *g = realloc(*v, (size_t)(*n + 1) * sizeof **v);
    if (!g) {
        snprintf(err, errlen, "out of memory hashing the data files");
        return -1;
    }
    *v = g;
    if (data_hash_file(path, &g[*n], err, errlen) != 0) return -1;
    (*n)++;
    return 0;
}

int data_hash_job(const job_spec *job, data_file_hash **out, int *n, char *err, size_t errlen)
{
    *out = NULL;
    *n = 0;
    const job_data *d = &job->data;
    if (d->kind == DATA_SYNTHETIC) return 0;
    const char *paths[] = {d->train_path, d->train_labels, d->val_path, d->val_labels};
    for (size_t i = 0; i < sizeof paths / sizeof paths[0]; i++) {
        if (!paths[i][0]) continue;
        glob_t g;
        if (glob(paths[i], 0, NULL, &g) != 0) {
            /* not a pattern, or nothing matches: hash the name as given */
            if (add(out, n, paths[i], err, errlen)) return -1;
            continue;
        }
        for (size_t k = 0; k < g.gl_pathc; k++)
            if (add(out, n, g.gl_pathv[k], err, errlen)) {
                globfree(&g);
                return -1;
            }
        globfree(&g);
    }
    return 0;
}
