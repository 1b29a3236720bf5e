/* ckpt_io.c — tmp + fsync + rename + directory fsync, file hashing, and the
 * fault-injection hooks of the tests. */
#include "runtime/ckpt/ckpt_io.h"
#include "lib/util/file_hash.h"
#include "runtime/ckpt/safetensors.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

static ckpt_io_hooks hooks;

void ckpt_io_set_hooks(const ckpt_io_hooks *h)
{
    if (h) hooks = *h;
    else memset(&hooks, 0, sizeof hooks);
}


int ckpt_io_write_all(int fd, const void *buf, size_t n)
{
    if (hooks.write_all) return hooks.write_all(fd, buf, n);
    return st_write_all(fd, buf, n);
}

static int do_fsync(int fd)
{
    if (hooks.fsync) return hooks.fsync(fd);
    return fsync(fd);
}

int ckpt_io_fsync_dir(const char *dir, char *err, size_t errlen)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return st_fail(err, errlen, "%s: cannot open directory (%s)", dir, strerror(errno));
    int rc = do_fsync(fd);
    int e = errno;
    close(fd);
    if (rc != 0) return st_fail(err, errlen, "%s: fsync of the directory failed (%s)", dir, strerror(e));
    return 0;
}

int ckpt_io_write_atomic(const char *path, ckpt_io_produce_fn produce, void *ctx, char *err,
                         size_t errlen)
{
    size_t len = strlen(path);
    char *tmp = malloc(len + 5), *dircopy = strdup(path);
    if (!tmp || !dircopy) {
        free(tmp);
        free(dircopy);
        return st_fail(err, errlen, "%s: out of memory", path);
    }
    memcpy(tmp, path, len);
    memcpy(tmp + len, ".tmp", 5);
    int rc = -1;
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        st_fail(err, errlen, "%s: cannot create (%s)", tmp, strerror(errno));
        goto out;
    }
    if (produce(fd, ctx, err, errlen) != 0) goto out_unlink;
    if (do_fsync(fd) != 0) {
        st_fail(err, errlen, "%s: fsync failed (%s)", tmp, strerror(errno));
        goto out_unlink;
    }
    int crc = close(fd);
    fd = -1;
    if (crc != 0) {
        st_fail(err, errlen, "%s: close failed (%s)", tmp, strerror(errno));
        goto out_unlink;
    }
    if (rename(tmp, path) != 0) {
        st_fail(err, errlen, "%s: rename to %s failed (%s)", tmp, path, strerror(errno));
        goto out_unlink;
    }
    rc = ckpt_io_fsync_dir(dirname(dircopy), err, errlen);
    goto out;
out_unlink:
    if (fd >= 0) close(fd);
    unlink(tmp);
out:
    free(tmp);
    free(dircopy);
    return rc;
}

typedef struct {
    const void *buf;
    size_t n;
    const char *path;
} bytes_ctx;

static int produce_bytes(int fd, void *ctx, char *err, size_t errlen)
{
    bytes_ctx *b = ctx;
    if (ckpt_io_write_all(fd, b->buf, b->n) != 0)
        return st_fail(err, errlen, "%s: write failed (%s)", b->path, strerror(errno));
    return 0;
}

typedef struct {
    st_writer *w;
    const char *path;
} st_out;

static int produce_st(int fd, void *ctx, char *err, size_t errlen)
{
    st_out *o = ctx;
    return st_writer_write_fd(o->w, fd, o->path, ckpt_io_write_all, err, errlen);
}

int ckpt_io_write_st_atomic(const char *path, st_writer *w, char *err, size_t errlen)
{
    st_out o = {w, path};
    return ckpt_io_write_atomic(path, produce_st, &o, err, errlen);
}

int ckpt_io_write_bytes_atomic(const char *path, const void *buf, size_t n, char *err,
                               size_t errlen)
{
    bytes_ctx b = {buf, n, path};
    return ckpt_io_write_atomic(path, produce_bytes, &b, err, errlen);
}

int ckpt_io_hash_file(const char *path, uint64_t *size, uint64_t *hash, char *err, size_t errlen)
{
    if (file_xxh3(path, size, hash, err, errlen) == 0) return 0;
    if (errno == ENOENT) return st_fail(err, errlen, "%s: missing (its rank did not write it)", path);
    return -1;
}

int ckpt_io_read_small(const char *path, size_t max, char **buf, size_t *len, char *err,
                       size_t errlen)
{
    *buf = NULL;
    *len = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        if (errno == ENOENT) return 1;
        return st_fail(err, errlen, "%s: cannot open (%s)", path, strerror(errno));
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return st_fail(err, errlen, "%s: not a regular file", path);
    }
    if ((uint64_t)st.st_size > max) {
        close(fd);
        return st_fail(err, errlen, "%s: %lld bytes, more than the %zu expected (corrupt?)", path,
                    (long long)st.st_size, max);
    }
    size_t cap = (size_t)st.st_size;
    char *b = malloc(cap + 1);
    if (!b) {
        close(fd);
        return st_fail(err, errlen, "%s: out of memory", path);
    }
    size_t n = 0;
    while (n < cap) {
        ssize_t k = read(fd, b + n, cap - n);
        if (k < 0 && errno == EINTR) continue;
        if (k < 0) {
            int e = errno;
            free(b);
            close(fd);
            return st_fail(err, errlen, "%s: read failed (%s)", path, strerror(e));
        }
        if (k == 0) break;
        n += (size_t)k;
    }
    close(fd);
    b[n] = 0;
    *buf = b;
    *len = n;
    return 0;
}

int ckpt_io_remove_dir(const char *path)
{
    DIR *d = opendir(path);
    if (!d) return errno == ENOENT ? 0 : -1;
    int rc = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        /* only plain files: a checkpoint step directory has nothing else, and a
         * stray subdirectory is someone's data, not ours to delete */
        if (unlinkat(dirfd(d), e->d_name, 0) != 0) rc = -1;
    }
    closedir(d);
    if (rmdir(path) != 0) rc = -1;
    return rc;
}
