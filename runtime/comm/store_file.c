/* store_file.c — the store as a shared directory: one file per key.
 *
 * set writes a temporary file and renames it over the key, so a reader sees the
 * old value or the new one, never half of one. add serialises on an flock'ed
 * lock file per key. get polls with a short backoff: bootstrap traffic is a few
 * keys per communicator, so inotify would buy nothing. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "lib/util/clock.h"
#include "runtime/comm/store_impl.h"

typedef struct {
    comm_store base;
    char dir[1024];
    unsigned tmp_counter;
} file_store;

/* Keys may hold '/', ':' ...: escape everything but [A-Za-z0-9._-] as %XX so
 * one key is one file name and two keys never share one. */
static int key_path(file_store *fs, const char *key, const char *suffix, char *out, size_t cap)
{
    size_t n = (size_t)snprintf(out, cap, "%s/", fs->dir);
    for (const unsigned char *k = (const unsigned char *)key; *k && n + 4 < cap; k++) {
        if ((*k >= 'a' && *k <= 'z') || (*k >= 'A' && *k <= 'Z') || (*k >= '0' && *k <= '9') ||
            *k == '_' || *k == '-' || (*k == '.' && k != (const unsigned char *)key))
            out[n++] = (char)*k;
        else
            n += (size_t)snprintf(out + n, cap - n, "%%%02X", *k);
    }
    if (n + strlen(suffix) + 1 >= cap)
        return store_fail(&fs->base, "file store: key '%.64s...' too long", key);
    strcpy(out + n, suffix);
    return 0;
}

static int write_atomically(file_store *fs, const char *path, const void *value, size_t len)
{
    char tmp[1200];
    snprintf(tmp, sizeof tmp, "%s/.tmp.%d.%u", fs->dir, (int)getpid(), fs->tmp_counter++);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0)
        return store_fail(&fs->base, "file store: cannot create %s: %s", tmp, strerror(errno));
    const char *p = value;
    size_t left = len;
    while (left > 0) {
        ssize_t w = write(fd, p, left);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            int e = errno;
            close(fd);
            unlink(tmp);
            return store_fail(&fs->base, "file store: write %s: %s", tmp, strerror(e));
        }
        p += w;
        left -= (size_t)w;
    }
    close(fd);
    if (rename(tmp, path) != 0) {
        int e = errno;
        unlink(tmp);
        return store_fail(&fs->base, "file store: rename to %s: %s", path, strerror(e));
    }
    return 0;
}

/* Reads the whole file into buf (at most cap); returns its length, -1 if absent,
 * -2 on another error. */
static long read_file(const char *path, void *buf, size_t cap)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return errno == ENOENT ? -1 : -2;
    struct stat st;
    if (fstat(fd, &st) != 0) {
        close(fd);
        return -2;
    }
    size_t want = (size_t)st.st_size < cap ? (size_t)st.st_size : cap, got = 0;
    while (got < want) {
        ssize_t r = read(fd, (char *)buf + got, want - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        got += (size_t)r;
    }
    close(fd);
    return (long)st.st_size;
}

static int fs_set(comm_store *s, const char *key, const void *value, size_t len)
{
    file_store *fs = (file_store *)s;
    char path[1200];
    if (key_path(fs, key, "", path, sizeof path) != 0)
        return -1;
    return write_atomically(fs, path, value, len);
}

static long fs_get(comm_store *s, const char *key, void *buf, size_t cap, double timeout_s)
{
    file_store *fs = (file_store *)s;
    char path[1200];
    if (key_path(fs, key, "", path, sizeof path) != 0)
        return -1;
    double deadline = clock_now_s() + timeout_s;
    long sleep_us = 200;
    for (;;) {
        long n = read_file(path, buf, cap);
        if (n >= 0)
            return n;
        if (n == -2)
            return store_fail(s, "file store: read %s: %s", path, strerror(errno));
        if (clock_now_s() >= deadline)
            return store_fail(s, "file store: key '%s' not set after %.1f s", key, timeout_s);
        usleep((useconds_t)sleep_us);
        if (sleep_us < 10000)
            sleep_us *= 2;
    }
}

static int fs_add(comm_store *s, const char *key, long delta, long *result)
{
    file_store *fs = (file_store *)s;
    char path[1200], lock[1200];
    if (key_path(fs, key, "", path, sizeof path) != 0 ||
        key_path(fs, key, ".lock", lock, sizeof lock) != 0)
        return -1;
    int fd = open(lock, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0)
        return store_fail(s, "file store: cannot open %s: %s", lock, strerror(errno));
    while (flock(fd, LOCK_EX) != 0) {
        if (errno != EINTR) {
            int e = errno;
            close(fd);
            return store_fail(s, "file store: flock %s: %s", lock, strerror(e));
        }
    }
    char text[32] = {0};
    long n = read_file(path, text, sizeof text - 1);
    long value = n > 0 ? strtol(text, NULL, 10) : 0;
    value += delta;
    int len = snprintf(text, sizeof text, "%ld", value);
    int rc = write_atomically(fs, path, text, (size_t)len);
    flock(fd, LOCK_UN);
    close(fd);
    if (rc == 0 && result)
        *result = value;
    return rc;
}

static void fs_close(comm_store *s)
{
    free(s);
}

static const store_ops file_ops = {
    .set = fs_set, .get = fs_get, .add = fs_add, .barrier = NULL, .close = fs_close,
};

comm_store *store_file_open(const char *dir, char *err, size_t errlen)
{
    if (strlen(dir) >= 900) {
        snprintf(err, errlen, "file store: directory name too long");
        return NULL;
    }
    if (mkdir(dir, 0700) != 0 && errno != EEXIST) {
        snprintf(err, errlen, "file store: cannot create %s: %s", dir, strerror(errno));
        return NULL;
    }
    struct stat st;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
        snprintf(err, errlen, "file store: %s is not a directory", dir);
        return NULL;
    }
    file_store *fs = calloc(1, sizeof *fs);
    if (!fs) {
        snprintf(err, errlen, "file store: out of memory");
        return NULL;
    }
    fs->base.ops = &file_ops;
    snprintf(fs->dir, sizeof fs->dir, "%s", dir);
    return &fs->base;
}
