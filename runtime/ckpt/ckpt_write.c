/* ckpt_write.c — writing a checkpoint step: each rank's file, then rank 0's
 * commit (index.json, latest, pruning).
 *
 * Crash safety rests on three orderings:
 *  - a step counts only when its index.json exists, and index.json is written
 *    after every rank file is durable; `latest` moves only after that;
 *  - before a rank replaces anything in a step directory it removes that
 *    directory's index.json (a committed step that is not `latest`: left over
 *    from a run that went past the step we resumed from), so a half-rewritten
 *    step never looks committed; the step `latest` names is never rewritten;
 *  - each rank first deletes its own old file of the step, so a failed write
 *    cannot leave a stale file from an earlier attempt for the commit to take.
 * Old steps are deleted only after the new `latest` is durable, index.json
 * first, so a crash mid-delete leaves an uncommitted directory, never a
 * committed one with holes. */
#include "runtime/ckpt/ckpt_internal.h"
#include "runtime/ckpt/ckpt_io.h"

#include <dirent.h>
#include <limits.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>


/* mkdir -p */
static int make_dirs(const char *path, char *err, size_t errlen)
{
    char buf[4096];
    if (snprintf(buf, sizeof buf, "%s", path) >= (int)sizeof buf)
        return st_fail(err, errlen, "%s: path too long", path);
    for (char *p = buf + 1;; p++) {
        if (*p == '/' || *p == 0) {
            char c = *p;
            *p = 0;
            if (mkdir(buf, 0755) != 0 && errno != EEXIST)
                return st_fail(err, errlen, "%s: cannot create directory (%s)", buf, strerror(errno));
            *p = c;
            if (!c) break;
        }
    }
    struct stat st;
    if (stat(path, &st) != 0 || !S_ISDIR(st.st_mode))
        return st_fail(err, errlen, "%s: not a directory", path);
    return 0;
}

int ckpt_latest_step(const char *dir, long *step, char *err, size_t errlen)
{
    char path[4096];
    if (strlen(dir) > CKPT_DIR_MAX) return st_fail(err, errlen, "%.100s...: path too long", dir);
    snprintf(path, sizeof path, "%s/latest", dir);
    char *text;
    size_t len;
    int rc = ckpt_io_read_small(path, 256, &text, &len, err, errlen);
    if (rc != 0) return rc;
    while (len > 0 && (text[len - 1] == '\n' || text[len - 1] == ' ' || text[len - 1] == '\r'))
        text[--len] = 0;
    long s = ckpt_parse_step_dirname(text);
    free(text);
    if (s < 0) return st_fail(err, errlen, "%s: does not name a step directory (corrupt)", path);
    *step = s;
    return 0;
}

static int file_exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

/* 1 when `step` is the committed step that `latest` names. */
static int is_latest_committed(const char *dir, long step)
{
    long cur;
    char e[8], path[4096], name[64];
    if (ckpt_latest_step(dir, &cur, e, 0) != 0 || cur != step) return 0;
    ckpt_step_dirname(name, sizeof name, step);
    snprintf(path, sizeof path, "%s/%s/index.json", dir, name);
    return file_exists(path);
}

/* The rank's pieces as a safetensors writer. */
static int build_shard(st_writer *w, long step, int rank, const ckpt_piece *pieces, int n,
                       const char *path, char *err, size_t errlen)
{
    char buf[64], why[160], tname[CKPT_NAME_MAX + 16], key[CKPT_NAME_MAX + 32];
    st_writer_set_metadata(w, "format", CKPT_FORMAT_SHARD);
    snprintf(buf, sizeof buf, "%d", CKPT_VERSION);
    st_writer_set_metadata(w, "version", buf);
    snprintf(buf, sizeof buf, "%ld", step);
    st_writer_set_metadata(w, "step", buf);
    snprintf(buf, sizeof buf, "%d", rank);
    st_writer_set_metadata(w, "rank", buf);
    for (int i = 0; i < n; i++) {
        const ckpt_piece *pc = &pieces[i];
        const ckpt_place *p = &pc->place;
        if (!memchr(pc->name, 0, sizeof pc->name) || !pc->name[0] || strchr(pc->name, '#'))
            return st_fail(err, errlen, "%s: piece %d has a bad name", path, i);
        if (ckpt_place_check(p, why, sizeof why) != 0)
            return st_fail(err, errlen, "%s: piece '%s': %s", path, pc->name, why);
        if (p->hi > p->lo && !pc->data)
            return st_fail(err, errlen, "%s: piece '%s' has no data", path, pc->name);
        /* the same name twice in one file (the tied head's wte): NAME#k */
        int dup = 0;
        for (int j = 0; j < i; j++) dup += strcmp(pieces[j].name, pc->name) == 0;
        if (dup) snprintf(tname, sizeof tname, "%s#%d", pc->name, dup);
        else snprintf(tname, sizeof tname, "%s", pc->name);
        /* a whole tp shard keeps its local shape (readable by any safetensors
         * tool); a partial flat slice is 1-D */
        int64_t shape[2];
        int ndim;
        if (p->lo == 0 && p->hi == ckpt_place_local_numel(p) && p->ndim == 2) {
            ndim = 2;
            shape[1] = p->split == CKPT_SPLIT_COLS
                           ? (int64_t)(ckpt_place_local_numel(p) / (uint64_t)p->shape[0])
                           : p->shape[1];
            shape[0] = shape[1] ? (int64_t)(p->hi / (uint64_t)shape[1]) : 0;
        } else {
            ndim = 1;
            shape[0] = (int64_t)(p->hi - p->lo);
        }
        if (st_writer_add(w, tname, ST_F32, ndim, shape, pc->data, err, errlen) != 0) return -1;
        char *place = ckpt_place_encode(pc->name, p);
        snprintf(key, sizeof key, "%s%s", CKPT_PLACE_PREFIX, tname);
        int rc = place ? st_writer_set_metadata(w, key, place) : -1;
        free(place);
        if (rc != 0) return st_fail(err, errlen, "%s: out of memory", path);
    }
    return 0;
}

int ckpt_write_rank(const char *dir, long step, int rank, const ckpt_piece *pieces, int n,
                    char *err, size_t errlen)
{
    char name[64], sdir[4096], path[4400], index[4400];
    if (strlen(dir) > CKPT_DIR_MAX) return st_fail(err, errlen, "%.100s...: path too long", dir);
    if (step < 0 || rank < 0 || rank >= CKPT_MAX_WORLD || n < 0)
        return st_fail(err, errlen, "%s: bad step %ld or rank %d", dir, step, rank);
    ckpt_step_dirname(name, sizeof name, step);
    snprintf(sdir, sizeof sdir, "%s/%s", dir, name);
    if (is_latest_committed(dir, step)) {
        st_fail(err, errlen, "%s: already the latest checkpoint (nothing written)", sdir);
        return 1;
    }
    if (make_dirs(sdir, err, errlen) != 0 || ckpt_io_fsync_dir(dir, err, errlen) != 0) return -1;
    snprintf(index, sizeof index, "%s/index.json", sdir);
    if (unlink(index) == 0) {
        if (ckpt_io_fsync_dir(sdir, err, errlen) != 0) return -1;
    } else if (errno != ENOENT) {
        return st_fail(err, errlen, "%s: cannot remove the old index (%s)", index, strerror(errno));
    }
    ckpt_rank_filename(name, sizeof name, rank);
    snprintf(path, sizeof path, "%s/%s", sdir, name);
    if (unlink(path) != 0 && errno != ENOENT)
        return st_fail(err, errlen, "%s: cannot remove the old file (%s)", path, strerror(errno));

    st_writer *w = st_writer_new();
    if (!w) return st_fail(err, errlen, "%s: out of memory", path);
    int rc = build_shard(w, step, rank, pieces, n, path, err, errlen);
    if (rc == 0) rc = ckpt_io_write_st_atomic(path, w, err, errlen);
    st_writer_free(w);
    return rc;
}

/* Checks rank file r of the step and returns its size and hash. */
static int check_rank_file(const char *path, long step, int rank, ckpt_file_sum *sum, char *err,
                           size_t errlen)
{
    if (ckpt_io_hash_file(path, &sum->size, &sum->hash, err, errlen) != 0) return -1;
    st_reader *r;
    if (st_reader_open(path, &r, err, errlen) != 0) return -1;
    const char *fmt = st_reader_metadata(r, "format");
    const char *s = st_reader_metadata(r, "step"), *k = st_reader_metadata(r, "rank");
    char want_s[32], want_k[32];
    snprintf(want_s, sizeof want_s, "%ld", step);
    snprintf(want_k, sizeof want_k, "%d", rank);
    int rc = 0;
    if (!fmt || strcmp(fmt, CKPT_FORMAT_SHARD) != 0 || !s || strcmp(s, want_s) != 0 || !k ||
        strcmp(k, want_k) != 0)
        rc = st_fail(err, errlen, "%s: not rank %d's shard of step %ld (stale or misplaced file)", path,
                  rank, step);
    st_reader_close(r);
    return rc;
}

/* Files of an earlier attempt that this commit does not list: *.tmp and rank
 * files beyond the world. */
static void remove_leftovers(const char *sdir, int world)
{
    DIR *d = opendir(sdir);
    if (!d) return;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        size_t len = strlen(e->d_name);
        int r;
        char tail[32];
        int tmp = len > 4 && strcmp(e->d_name + len - 4, ".tmp") == 0;
        int stale = sscanf(e->d_name, "rank_%d.%31s", &r, tail) == 2 && r >= world;
        if (tmp || stale) unlinkat(dirfd(d), e->d_name, 0);
    }
    closedir(d);
}

typedef struct {
    long step;
    char name[256];
} step_entry;

static int cmp_step_desc(const void *a, const void *b)
{
    long x = ((const step_entry *)a)->step, y = ((const step_entry *)b)->step;
    return x < y ? 1 : x > y ? -1 : 0;
}

/* Keep `keep` committed steps up to `step` (itself included); delete older
 * committed ones and incomplete ones before it. Steps after it are left alone:
 * they belong to a run we resumed before, and are rewritten when reached. The
 * pinned step (checkpoint.resume: PATH) is never deleted: a restart loads it. */
/* Whether DIR/NAME is the pinned step directory (the same directory, however
 * either path is spelled). */
static int is_pinned(const char *pinned_real, const char *dir, const char *name)
{
    if (!pinned_real) return 0;
    char path[4096], real[PATH_MAX];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    return realpath(path, real) && strcmp(real, pinned_real) == 0;
}

static void prune(const char *dir, long step, int keep, const char *pinned)
{
    char pinned_buf[PATH_MAX];
    const char *pinned_real = pinned && realpath(pinned, pinned_buf) ? pinned_buf : NULL;
    DIR *d = opendir(dir);
    if (!d) return;
    step_entry *committed = NULL;
    int n = 0, cap = 0;
    struct dirent *e;
    char path[4096];
    while ((e = readdir(d)) != NULL) {
        long s = ckpt_parse_step_dirname(e->d_name);
        if (s < 0 || s >= step || is_pinned(pinned_real, dir, e->d_name)) continue;
        snprintf(path, sizeof path, "%s/%s/index.json", dir, e->d_name);
        if (!file_exists(path)) {
            snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
            ckpt_io_remove_dir(path);
            continue;
        }
        if (n == cap) {
            cap = cap ? 2 * cap : 16;
            step_entry *t = realloc(committed, (size_t)cap * sizeof *t);
            if (!t) break;
            committed = t;
        }
        committed[n].step = s;
        snprintf(committed[n].name, sizeof committed[n].name, "%s", e->d_name);
        n++;
    }
    closedir(d);
    if (keep > 0 && committed) {
        qsort(committed, (size_t)n, sizeof *committed, cmp_step_desc);
        for (int i = keep - 1; i < n; i++) {
            if (i < 0) continue;
            snprintf(path, sizeof path, "%s/%s/index.json", dir, committed[i].name);
            unlink(path);
            snprintf(path, sizeof path, "%s/%s", dir, committed[i].name);
            char e2[8];
            ckpt_io_fsync_dir(path, e2, 0);
            ckpt_io_remove_dir(path);
        }
    }
    free(committed);
    char e3[8];
    ckpt_io_fsync_dir(dir, e3, 0);
}

int ckpt_remove_incomplete(const char *dir, char *removed, size_t n)
{
    if (n) removed[0] = 0;
    DIR *d = opendir(dir);
    if (!d) return 0;
    int count = 0;
    size_t used = 0;
    struct dirent *e;
    char path[4096];
    while ((e = readdir(d)) != NULL) {
        if (ckpt_parse_step_dirname(e->d_name) < 0) continue;
        snprintf(path, sizeof path, "%s/%s/index.json", dir, e->d_name);
        if (file_exists(path)) continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        if (ckpt_io_remove_dir(path) != 0) continue;
        count++;
        if (used < n) used += (size_t)snprintf(removed + used, n - used, "%s%s", count > 1 ? ", " : "", e->d_name);
    }
    closedir(d);
    if (count) {
        char e3[8];
        ckpt_io_fsync_dir(dir, e3, 0);
    }
    return count;
}

int ckpt_commit(const char *dir, const ckpt_meta *meta, int keep, char *err, size_t errlen)
{
    char name[64], sdir[4096], path[4400];
    if (strlen(dir) > CKPT_DIR_MAX) return st_fail(err, errlen, "%.100s...: path too long", dir);
    if (meta->step < 0 || meta->world < 1 || meta->world > CKPT_MAX_WORLD || meta->dp < 1 ||
        meta->tp < 1 || meta->pp < 1 || meta->n_loss < 0)
        return st_fail(err, errlen, "%s: bad checkpoint metadata (step %ld, world %d)", dir, meta->step,
                    meta->world);
    ckpt_step_dirname(name, sizeof name, meta->step);
    snprintf(sdir, sizeof sdir, "%s/%s", dir, name);
    if (is_latest_committed(dir, meta->step)) {
        st_fail(err, errlen, "%s: already the latest checkpoint (nothing written)", sdir);
        return 1;
    }
    ckpt_file_sum *sums = calloc((size_t)meta->world, sizeof *sums);
    if (!sums) return st_fail(err, errlen, "%s: out of memory", sdir);
    int rc = -1;
    for (int r = 0; r < meta->world; r++) {
        char fname[64];
        ckpt_rank_filename(fname, sizeof fname, r);
        snprintf(path, sizeof path, "%s/%s", sdir, fname);
        if (check_rank_file(path, meta->step, r, &sums[r], err, errlen) != 0) goto out;
    }
    remove_leftovers(sdir, meta->world);
    char *text = ckpt_index_encode(meta, sums);
    if (!text) {
        st_fail(err, errlen, "%s: out of memory", sdir);
        goto out;
    }
    snprintf(path, sizeof path, "%s/index.json", sdir);
    rc = ckpt_io_write_bytes_atomic(path, text, strlen(text), err, errlen);
    free(text);
    if (rc != 0) goto out;
    char line[80];
    int len = snprintf(line, sizeof line, "%s\n", name);
    snprintf(path, sizeof path, "%s/latest", dir);
    rc = ckpt_io_write_bytes_atomic(path, line, (size_t)len, err, errlen);
    if (rc != 0) goto out;
    prune(dir, meta->step, keep, meta->pinned);
out:
    free(sums);
    return rc;
}

int ckpt_save(const char *dir, int rank, const ckpt_meta *meta, const ckpt_piece *pieces, int n,
              int keep, ckpt_barrier_fn barrier, void *ctx, char *err, size_t errlen)
{
    int rc = ckpt_write_rank(dir, meta->step, rank, pieces, n, err, errlen);
    /* everyone reaches the barrier, failed or not, so no rank waits forever */
    if (barrier && barrier(ctx) != 0 && rc == 0)
        rc = st_fail(err, errlen, "%s: barrier failed while saving step %ld", dir, meta->step);
    if (rank == 0 && rc == 0) rc = ckpt_commit(dir, meta, keep, err, errlen);
    return rc;
}
