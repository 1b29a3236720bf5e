/* agent_watchdog.c — nothing a worker started outlives the job.
 *
 * The agent starts one watchdog process in a session of its own, before any
 * worker, and holds the write end of a pipe to it. The watchdog learns each
 * worker's process group through that pipe; when the pipe ends — the agent
 * exited, or was killed with SIGKILL — it kills, until none is left:
 *   - every process that carries DTRUN_AGENT_ID=ID in its environment (every
 *     worker and everything a worker started, in whatever process group or
 *     session, unless it replaced its environment), and
 *   - every process still in a worker's process group and session (those that
 *     replaced their environment but stayed in the group). A group is only
 *     trusted while its leader is the worker the agent named (same start time)
 *     or gone: a pid reused by an unrelated session leader is never touched.
 * So the workers die with their agent however it dies (they are spawned
 * directly; agent_spawn.c), and what they started dies with them. A normal exit
 * waits (at most 2 s) for that sweep, so when dtrun returns, nothing of its job
 * runs.
 *
 * The watchdog is a fork of the agent that does not exec: an exec of dtrun
 * would load its libraries again, and OpenBLAS's thread pool, started by its
 * constructor, spins for ~0.1 s of a core — on a 2-core machine that alone made
 * an 8-worker launch 40 % slower (issue 25.13). The fork runs only the loop
 * below (glibc's fork leaves malloc usable in the child of a threaded process),
 * shows itself in ps as "dtrun --dtrun-watchdog", and hides the agent's own
 * DTRUN_AGENT_ID (a nested agent's outer watchdog must not kill this one before
 * it has swept its own job). */
#include "lib/launch/agent_impl.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define WATCHDOG_MAX_GROUPS 4096

/* ---- the agent's side ---- */

static int watchdog_run(int fd, const char *agent_id);

void agent_watchdog_start(agent *ag)
{
    ag->watchdog_fd = -1;
    ag->watchdog_pid = -1;
    char host[64] = "";
    gethostname(host, sizeof host - 1);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    snprintf(ag->agent_id, sizeof ag->agent_id, "%s:%ld:%lx", host, (long)getpid(),
             (unsigned long)(ts.tv_sec * 1000000000L + ts.tv_nsec));
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0) {
        fprintf(stderr, "dtrun: warning: no watchdog (pipe: %s): a worker's own children may outlive a killed "
                        "agent\n", strerror(errno));
        return;
    }
    pid_t pid = fork();
    if (pid == 0) {
        close(fds[1]); /* or the pipe never ends */
        setsid();      /* a terminal's SIGINT / SIGHUP to our group must not reach it */
        _exit(watchdog_run(fds[0], ag->agent_id));
    }
    close(fds[0]);
    if (pid < 0) {
        fprintf(stderr, "dtrun: warning: no watchdog (fork: %s): a worker's own children may outlive a killed "
                        "agent\n", strerror(errno));
        close(fds[1]);
        return;
    }
    ag->watchdog_fd = fds[1];
    ag->watchdog_pid = pid;
}

void agent_watchdog_tell_group(agent *ag, pid_t pgid)
{
    if (ag->watchdog_fd < 0) return;
    char line[32];
    int len = snprintf(line, sizeof line, "pgid %ld\n", (long)pgid);
    /* one short write to a pipe is atomic; a dead watchdog gives EPIPE (SIGPIPE is ignored) */
    if (write(ag->watchdog_fd, line, (size_t)len) != len) {}
}

void agent_watchdog_finish(agent *ag)
{
    if (ag->watchdog_fd < 0) return;
    close(ag->watchdog_fd);
    ag->watchdog_fd = -1;
    /* woken the moment it exits (Linux 5.3+); else polled every 10 ms */
    int pfd = (int)syscall(SYS_pidfd_open, ag->watchdog_pid, 0);
    if (pfd >= 0) {
        struct pollfd p = {.fd = pfd, .events = POLLIN};
        while (poll(&p, 1, 2000) < 0 && errno == EINTR) {}
        close(pfd);
        waitpid(ag->watchdog_pid, NULL, WNOHANG);
        return; /* still sweeping after 2 s: it goes on without us (init reaps it) */
    }
    for (int i = 0; i < 200; i++) {
        pid_t r = waitpid(ag->watchdog_pid, NULL, WNOHANG);
        if (r == ag->watchdog_pid || (r < 0 && errno != EINTR)) return;
        struct timespec ts = {0, 10 * 1000000L};
        nanosleep(&ts, NULL);
    }
    /* Still sweeping after 2 s: it goes on without us (init reaps it). */
}

/* ---- the watchdog process ---- */

typedef struct {
    pid_t pgid;
    unsigned long long start; /* the leader's start time when we heard of it; 0 unknown */
} group;

/* Fields of /proc/PID/stat after the command name: state, pgrp, session, start time. */
static int read_stat(pid_t pid, char *state, long *pgrp, long *session, unsigned long long *start)
{
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%ld/stat", (long)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0) return -1;
    buf[n] = 0;
    char *p = strrchr(buf, ')'); /* the name may hold spaces and parentheses */
    if (!p) return -1;
    /* ") S ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime stime cutime
     *  cstime priority nice threads itrealvalue starttime" */
    unsigned long long st = 0;
    long ppid;
    if (sscanf(p + 1, " %c %ld %ld %ld %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %llu",
               state, &ppid, pgrp, session, &st) != 5)
        return -1;
    if (start) *start = st;
    return 0;
}

/* Whether /proc/PID/environ holds the entry "DTRUN_AGENT_ID=ID" exactly. */
static int carries_id(pid_t pid, const char *entry, size_t elen)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%ld/environ", (long)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 0;
    size_t cap = 1 << 16, len = 0;
    char *buf = malloc(cap + 1);
    int found = 0;
    while (buf) {
        if (len == cap) {
            if (cap >= (8u << 20)) break; /* an environment that large: read no further */
            char *b = realloc(buf, cap * 2 + 1);
            if (!b) break;
            buf = b;
            cap *= 2;
        }
        ssize_t n = read(fd, buf + len, cap - len);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        len += (size_t)n;
    }
    close(fd);
    if (buf) buf[len] = 0; /* entries end with NUL; so does the last one now */
    for (size_t i = 0; buf && i < len; i += strlen(buf + i) + 1) {
        if (i + elen <= len && !memcmp(buf + i, entry, elen) && buf[i + elen] == 0) {
            found = 1;
            break;
        }
    }
    free(buf);
    return found;
}

/* Whether group g may still be trusted to be the worker's. */
static int group_is_ours(const group *g)
{
    char state;
    long pgrp, session;
    unsigned long long start;
    if (read_stat(g->pgid, &state, &pgrp, &session, &start) != 0) return 1; /* the leader is gone */
    return g->start != 0 && start == g->start;
}

/* One pass over /proc: SIGKILL to every live process of the job. Returns how many.
 * A process of the job started after the watchdog (`since`, its own start
 * time): older ones are not read further, so a sweep costs little however
 * many processes the machine runs. */
static int sweep_once(const char *entry, const group *groups, int ngroups, unsigned long long since)
{
    int ours[WATCHDOG_MAX_GROUPS];
    for (int i = 0; i < ngroups; i++) ours[i] = group_is_ours(&groups[i]);
    DIR *d = opendir("/proc");
    if (!d) return 0;
    size_t elen = strlen(entry);
    pid_t self = getpid();
    int killed = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        if (!isdigit((unsigned char)de->d_name[0])) continue;
        pid_t pid = (pid_t)atol(de->d_name);
        if (pid == self || pid <= 1) continue;
        char state;
        long pgrp, session;
        unsigned long long start;
        if (read_stat(pid, &state, &pgrp, &session, &start) != 0) continue;
        if (state == 'Z' || state == 'X') continue; /* dead already, waiting to be reaped */
        if (start < since) continue;
        int hit = 0;
        for (int i = 0; i < ngroups && !hit; i++)
            hit = ours[i] && pgrp == groups[i].pgid && session == groups[i].pgid;
        if (!hit) hit = carries_id(pid, entry, elen);
        if (hit && kill(pid, SIGKILL) == 0) killed++;
    }
    closedir(d);
    return killed;
}

/* What ps shows for the watchdog: the agent's command line (argv's bytes, from
 * argv[0] on, /proc/self/cmdline long) rewritten in place, so a pgrep for the
 * agent's arguments finds the agent only. */
static void retitle(const char *title)
{
    char buf[4096];
    int fd = open("/proc/self/cmdline", O_RDONLY | O_CLOEXEC);
    ssize_t len = fd >= 0 ? read(fd, buf, sizeof buf) : -1;
    if (fd >= 0) close(fd);
    if (len <= 0 || (size_t)len >= sizeof buf) return; /* longer: left as it is */
    extern char *program_invocation_name; /* glibc: argv[0] itself */
    size_t n = strlen(title) < (size_t)len - 1 ? strlen(title) : (size_t)len - 1;
    memset(program_invocation_name, 0, (size_t)len);
    memcpy(program_invocation_name, title, n);
    prctl(PR_SET_NAME, "dtrun-watchdog");
}

/* The agent's own DTRUN_AGENT_ID (when it runs inside another dtrun's job) is
 * renamed in place: /proc/PID/environ shows the bytes the process started with. */
static void hide_outer_id(void)
{
    static const char name[] = "DTRUN_AGENT_ID=";
    char *v = getenv("DTRUN_AGENT_ID");
    if (v && !strncmp(v - (sizeof name - 1), name, sizeof name - 1)) v[-(int)(sizeof name - 1)] = 'x';
}

/* The watchdog's life: every descriptor but the pipe closed, then wait for
 * the pipe's end and sweep. */
static int watchdog_run(int fd, const char *agent_id)
{
    if (fd > 3) close_range(3, (unsigned)fd - 1, 0);
    close_range(fd >= 3 ? (unsigned)fd + 1 : 3, ~0U, 0);
    retitle("dtrun --dtrun-watchdog");
    hide_outer_id();
    char entry[256];
    snprintf(entry, sizeof entry, "DTRUN_AGENT_ID=%s", agent_id);
    /* It ends when the agent does (its pipe), and only then has work to do.
     * Slurm signals every process of a job step, this one included, when
     * srun passes on a signal (SIGUSR1 before the time limit, SIGTERM at
     * scancel): none of them may end it first. SIGKILL still does. */
    signal(SIGINT, SIG_IGN);
    signal(SIGHUP, SIG_IGN);
    signal(SIGPIPE, SIG_IGN);
    signal(SIGTERM, SIG_IGN);
    signal(SIGUSR1, SIG_IGN);
    signal(SIGUSR2, SIG_IGN);
    char my_state;
    long my_pgrp, my_session;
    unsigned long long since = 0;
    if (read_stat(getpid(), &my_state, &my_pgrp, &my_session, &since) != 0) since = 0;
    /* Nothing of ours to write to: the agent's console may be gone. */
    static group groups[WATCHDOG_MAX_GROUPS];
    int ngroups = 0;
    char buf[4096], line[64];
    size_t ll = 0;
    for (;;) {
        ssize_t n = read(fd, buf, sizeof buf);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break; /* the agent is gone */
        for (ssize_t i = 0; i < n; i++) {
            if (buf[i] != '\n') {
                if (ll < sizeof line - 1) line[ll++] = buf[i];
                continue;
            }
            line[ll] = 0;
            ll = 0;
            long pgid;
            if (sscanf(line, "pgid %ld", &pgid) != 1 || pgid <= 1) continue;
            group g = {.pgid = (pid_t)pgid};
            char state;
            long pg, sess;
            if (read_stat(g.pgid, &state, &pg, &sess, &g.start) != 0) g.start = 0;
            if (ngroups < WATCHDOG_MAX_GROUPS) groups[ngroups++] = g;
            else { memmove(groups, groups + 1, (WATCHDOG_MAX_GROUPS - 1) * sizeof *groups); groups[ngroups - 1] = g; }
        }
    }
    /* Until a pass finds nothing alive (a process may fork while we look). */
    for (int round = 0; round < 500; round++) {
        if (sweep_once(entry, groups, ngroups, since) == 0) break;
        struct timespec ts = {0, 5 * 1000000L};
        nanosleep(&ts, NULL);
    }
    return 0;
}
