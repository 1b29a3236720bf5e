/* run_lock.c — flock(2) on a lock file that names its holder (run_lock.h). */
#include "lib/launch/run_lock.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

struct run_lock {
    int fd;
};

/* mkdir -p */
static int make_dirs(const char *path)
{
    char buf[4096];
    snprintf(buf, sizeof buf, "%s", path);
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/') continue;
        *p = 0;
        if (mkdir(buf, 0777) != 0 && errno != EEXIST) return -1;
        *p = '/';
    }
    return mkdir(buf, 0777) == 0 || errno == EEXIST ? 0 : -1;
}

/* The file path names once every symbolic link on the way is followed
 * (realpath(3)), also when the file does not exist yet: its directory resolved,
 * and a link that points nowhere yet followed to where the file will be made.
 * 0, or -1 (then out is path as given). */
static int resolve(const char *path, char *out, size_t n, int depth)
{
    char real[PATH_MAX];
    if (realpath(path, real)) return snprintf(out, n, "%s", real) < (int)n ? 0 : -1;
    int e = errno;
    snprintf(out, n, "%s", path);
    if (e != ENOENT || depth > 40) return -1;
    char dir[PATH_MAX];
    const char *slash = strrchr(path, '/'), *base = slash ? slash + 1 : path;
    if (!slash) snprintf(dir, sizeof dir, ".");
    else if (slash == path) snprintf(dir, sizeof dir, "/");
    else snprintf(dir, sizeof dir, "%.*s", (int)(slash - path), path);
    char next[2 * PATH_MAX + 2];
    struct stat st;
    if (lstat(path, &st) == 0 && S_ISLNK(st.st_mode)) { /* dangling: where the worker's fopen will create it */
        char target[PATH_MAX];
        ssize_t len = readlink(path, target, sizeof target - 1);
        if (len <= 0) return -1;
        target[len] = 0;
        if (target[0] == '/') snprintf(next, sizeof next, "%s", target);
        else snprintf(next, sizeof next, "%s/%s", dir, target);
        return resolve(next, out, n, depth + 1);
    }
    if (!realpath(dir, real)) return -1;
    snprintf(next, sizeof next, "%s/%s", strcmp(real, "/") ? real : "", base);
    if (strlen(next) >= n) return -1;
    memcpy(out, next, strlen(next) + 1);
    return 0;
}

/* The lock of a checkpoint directory or metrics file, beside its resolved
 * path: two runs that reach one file by different names (a symbolic link to
 * it, or to a directory on its way) take one lock. */
static void lock_file_of(const char *path, int is_dir, char *out, size_t n)
{
    char real[PATH_MAX];
    resolve(path, real, sizeof real, 0); /* (after the directories were made) */
    if (is_dir) {
        snprintf(out, n, "%s/.dtrun.lock", real);
        return;
    }
    const char *slash = strrchr(real, '/');
    if (slash) snprintf(out, n, "%.*s/.%s.dtrun.lock", (int)(slash - real), real, slash + 1);
    else snprintf(out, n, ".%s.dtrun.lock", real);
}

/* The holder's "pid N host H", or "a process that left no name". */
static void read_holder(int fd, char *out, size_t n)
{
    char buf[512];
    ssize_t got = pread(fd, buf, sizeof buf - 1, 0);
    buf[got > 0 ? got : 0] = 0;
    int pid = 0;
    char host[256] = "";
    if (sscanf(buf, "pid %d host %255s", &pid, host) == 2) snprintf(out, n, "pid %d on host %s", pid, host);
    else snprintf(out, n, "a process that has not written its name yet");
}

run_lock *run_lock_take(const char *what, const char *path, int is_dir, int *busy, char *err, size_t errlen)
{
    *busy = 0;
    char lock_path[4200], real[PATH_MAX];
    /* a directory where its name leads (a link to one not made yet included) */
    if (is_dir && (resolve(path, real, sizeof real, 0), make_dirs(real) != 0)) {
        snprintf(err, errlen, "%s %s: cannot create the directory (%s)", what, path, strerror(errno));
        return NULL;
    }
    const char *slash = strrchr(path, '/');
    if (!is_dir && slash && slash > path) { /* the metrics file's directory, as the worker would make it */
        char parent[4096];
        snprintf(parent, sizeof parent, "%.*s", (int)(slash - path), path);
        if (make_dirs(parent) != 0) {
            snprintf(err, errlen, "%s %s: cannot create its directory (%s)", what, path, strerror(errno));
            return NULL;
        }
    }
    lock_file_of(path, is_dir, lock_path, sizeof lock_path);
    int fd = open(lock_path, O_RDWR | O_CREAT | O_CLOEXEC, 0666);
    if (fd < 0) {
        snprintf(err, errlen, "%s %s: cannot create the lock file %s (%s)", what, path, lock_path, strerror(errno));
        return NULL;
    }
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        int e = errno;
        if (e == EWOULDBLOCK) {
            char holder[320];
            read_holder(fd, holder, sizeof holder);
            *busy = 1;
            snprintf(err, errlen, "%s %s: in use by another dtrun run (%s; lock %s); wait for it to end, or give "
                                  "this run another %s", what, path, holder, lock_path, what);
        } else {
            snprintf(err, errlen, "%s %s: cannot lock %s (%s)", what, path, lock_path, strerror(e));
        }
        close(fd);
        return NULL;
    }
    char host[256] = "?", line[320];
    gethostname(host, sizeof host - 1);
    host[sizeof host - 1] = 0;
    int len = snprintf(line, sizeof line, "pid %d host %s\n", (int)getpid(), host);
    if (ftruncate(fd, 0) != 0 || pwrite(fd, line, (size_t)len, 0) != len) {
        /* the lock holds without the name; a second run says so */
    }
    run_lock *l = malloc(sizeof *l);
    if (!l) {
        close(fd);
        snprintf(err, errlen, "%s %s: out of memory", what, path);
        return NULL;
    }
    l->fd = fd;
    return l;
}

void run_lock_release(run_lock *l)
{
    if (!l) return;
    close(l->fd); /* closing the only descriptor drops the flock */
    free(l);
}
