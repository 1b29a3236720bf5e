/* mapped_file.c — a whole regular file mmapped read-only (see source.h). Text
 * and token corpora can be far larger than memory; a mapping costs only the
 * pages that windows touch. */
#include "runtime/data/source.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static void mapped_register(const unsigned char *bytes, size_t len, const char *path, const struct stat *st);
static void mapped_unregister(const unsigned char *bytes);

int mapped_file_open(mapped_file *m, const char *path, char *err, size_t errlen)
{
    m->bytes = NULL;
    m->len = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        data_fail(err, errlen, "%s: cannot open (%s)", path, strerror(errno));
        return -1;
    }
    struct stat st;
    if (fstat(fd, &st) != 0) {
        data_fail(err, errlen, "%s: cannot stat (%s)", path, strerror(errno));
        close(fd);
        return -1;
    }
    if (!S_ISREG(st.st_mode)) {
        data_fail(err, errlen, "%s: not a regular file (%s)", path,
                  S_ISDIR(st.st_mode) ? "it is a directory" : "only regular files can be mapped");
        close(fd);
        return -1;
    }
    if (st.st_size == 0) { /* mmap refuses length 0; callers word "empty" themselves */
        close(fd);
        return 0;
    }
    void *map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    int map_errno = errno;
    close(fd); /* the mapping keeps the file alive */
    if (map == MAP_FAILED) {
        data_fail(err, errlen, "%s: cannot mmap (%s)", path, strerror(map_errno));
        return -1;
    }
    m->bytes = map;
    m->len = (size_t)st.st_size;
    mapped_register(m->bytes, m->len, path, &st);
    return 0;
}

void mapped_file_close(mapped_file *m)
{
    if (m->bytes) {
        mapped_unregister(m->bytes);
        munmap((void *)m->bytes, m->len);
    }
    m->bytes = NULL;
    m->len = 0;
}

/* ---- SIGBUS on a file truncated under its mapping (source.h) ---- */

#define MAPPED_MAX 4096

/* Every live mapping, so that a fault's address names its file, and the
 * file's identity when it was mapped, for mapped_changed. Written at open and
 * close (start-up, tear-down), read by the handler. */
static struct {
    const unsigned char *bytes;
    size_t len;
    char path[1024];
    dev_t dev;
    ino_t ino;
    struct timespec mtime, ctime;
} mapped[MAPPED_MAX];
static pthread_mutex_t mapped_lock = PTHREAD_MUTEX_INITIALIZER;

_Thread_local sigjmp_buf mapped_guard_jmp;
static _Thread_local volatile sig_atomic_t guard_armed;
static _Thread_local const void *volatile fault_addr;

static void on_sigbus(int sig, siginfo_t *si, void *ctx)
{
    (void)ctx;
    if (guard_armed) {
        guard_armed = 0;
        fault_addr = si->si_addr;
        siglongjmp(mapped_guard_jmp, 1);
    }
    signal(sig, SIG_DFL); /* not ours: die of it as before */
    raise(sig);
}

static void install_handler(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_sigbus;
    sa.sa_flags = SA_SIGINFO;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGBUS, &sa, NULL);
}

void mapped_guard_arm(void)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, install_handler);
    fault_addr = NULL;
    guard_armed = 1;
}

void mapped_guard_end(void) { guard_armed = 0; }

static void mapped_register(const unsigned char *bytes, size_t len, const char *path, const struct stat *st)
{
    pthread_mutex_lock(&mapped_lock);
    for (int i = 0; i < MAPPED_MAX; i++)
        if (!mapped[i].bytes) {
            mapped[i].len = len;
            snprintf(mapped[i].path, sizeof mapped[i].path, "%s", path);
            mapped[i].dev = st->st_dev;
            mapped[i].ino = st->st_ino;
            mapped[i].mtime = st->st_mtim;
            mapped[i].ctime = st->st_ctim;
            mapped[i].bytes = bytes;
            break;
        }
    pthread_mutex_unlock(&mapped_lock);
}

static void mapped_unregister(const unsigned char *bytes)
{
    pthread_mutex_lock(&mapped_lock);
    for (int i = 0; i < MAPPED_MAX; i++)
        if (mapped[i].bytes == bytes) mapped[i].bytes = NULL;
    pthread_mutex_unlock(&mapped_lock);
}

void mapped_guard_describe(char *msg, size_t n)
{
    const unsigned char *a = fault_addr;
    for (int i = 0; i < MAPPED_MAX; i++) {
        if (!mapped[i].bytes || a < mapped[i].bytes || a >= mapped[i].bytes + mapped[i].len) continue;
        struct stat st;
        if (stat(mapped[i].path, &st) == 0)
            snprintf(msg, n, "%s: the data file changed while the run read it: %zu bytes when opened, %lld now "
                             "(truncated or rewritten in place)", mapped[i].path, mapped[i].len, (long long)st.st_size);
        else
            snprintf(msg, n, "%s: the data file changed while the run read it: %zu bytes when opened, now gone (%s)",
                     mapped[i].path, mapped[i].len, strerror(errno));
        return;
    }
    snprintf(msg, n, "a data file changed while the run read it (a read past its end raised SIGBUS)");
}

/* ---- a file changed in place (source.h) ---- */

static int same_time(struct timespec a, struct timespec b) { return a.tv_sec == b.tv_sec && a.tv_nsec == b.tv_nsec; }

static void when(struct timespec t, char *out, size_t n)
{
    struct tm tm;
    time_t s = t.tv_sec;
    if (!localtime_r(&s, &tm) || !strftime(out, n, "%Y-%m-%d %H:%M:%S", &tm)) snprintf(out, n, "%lld", (long long)s);
}

int mapped_changed(char *msg, size_t n)
{
    int changed = 0;
    pthread_mutex_lock(&mapped_lock);
    for (int i = 0; i < MAPPED_MAX && !changed; i++) {
        struct stat st;
        if (!mapped[i].bytes || stat(mapped[i].path, &st) != 0) continue; /* removed: the mapping keeps it */
        if (st.st_dev != mapped[i].dev || st.st_ino != mapped[i].ino) continue; /* replaced: the same */
        const char *path = mapped[i].path;
        char then[32], now[32];
        changed = 1;
        if ((size_t)st.st_size != mapped[i].len) {
            snprintf(msg, n, "%s: the data file changed while the run read it: %zu bytes when opened, %lld now "
                             "(truncated or rewritten in place)", path, mapped[i].len, (long long)st.st_size);
        } else if (!same_time(st.st_mtim, mapped[i].mtime)) {
            when(mapped[i].mtime, then, sizeof then);
            when(st.st_mtim, now, sizeof now);
            snprintf(msg, n, "%s: the data file changed while the run read it: rewritten in place (%zu bytes, "
                             "modified %s when opened, %s now)", path, mapped[i].len, then, now);
        } else if (!same_time(st.st_ctim, mapped[i].ctime)) {
            when(st.st_ctim, now, sizeof now);
            snprintf(msg, n, "%s: the data file changed while the run read it: its inode changed at %s (same size "
                             "and mtime: rewritten with its mtime restored, or its mode, owner or links changed)",
                     path, now);
        } else {
            changed = 0;
        }
    }
    pthread_mutex_unlock(&mapped_lock);
    return changed;
}
