/* agent_spawn.c — start the node's workers: environment, pipes, uv_spawn of the
 * program itself while the watchdog ties the workers' lives to the agent's
 * (agent_watchdog.c), else through the child guard (agent.h). */
#include "lib/launch/agent_impl.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "lib/launch/agent_env.h"
#include "lib/util/shm_name.h"

extern char **environ;

int agent_child_guard_main(int argc, char **argv)
{
    if (argc < 5) {
        fprintf(stderr, "dtrun: %s is internal to the agent\n", AGENT_CHILD_GUARD_FLAG);
        return 2;
    }
    pid_t agent_pid = (pid_t)atol(argv[2]);
    /* The death signal is tied to the thread that forked us, which is the agent's
     * loop thread: it lives as long as the agent. It survives execve (except
     * into set-user-ID programs). */
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) {
        fprintf(stderr, "dtrun: prctl(PR_SET_PDEATHSIG): %s\n", strerror(errno));
        return 126;
    }
    /* The agent may have died before prctl took effect: then nobody would kill us. */
    if (getppid() != agent_pid) _exit(128 + SIGKILL);
    const char *file = argv[3];
    execvp(file, argv + 4);
    int e = errno;
    fprintf(stderr, "dtrun: cannot run '%s': %s\n", file, strerror(e));
    return e == ENOENT ? 127 : 126;
}

/* An executable regular file (and, for a script, its #! interpreter). */
static int runnable(const char *path)
{
    struct stat st;
    if (stat(path, &st) != 0 || !S_ISREG(st.st_mode) || access(path, X_OK) != 0) return 0;
    char head[256];
    FILE *f = fopen(path, "re");
    size_t n = f ? fread(head, 1, sizeof head - 1, f) : 0;
    if (f) fclose(f);
    if (n < 2 || head[0] != '#' || head[1] != '!') return 1;
    head[n] = 0;
    char *interp = head + 2 + strspn(head + 2, " \t");
    interp[strcspn(interp, " \t\r\n")] = 0;
    return interp[0] && stat(interp, &st) == 0 && S_ISREG(st.st_mode) && access(interp, X_OK) == 0;
}

/* Whether execvp(file) will find something it can run, searching PATH as it
 * does. Only then is a worker spawned directly: whatever would fail goes through
 * the child guard, which says why in one line and exits 127 / 126. */
static int program_resolves(const char *file)
{
    if (strchr(file, '/')) return runnable(file);
    const char *path = getenv("PATH");
    if (!path) path = "/bin:/usr/bin";
    for (const char *p = path;; p++) {
        const char *end = strchr(p, ':');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        char full[4096];
        if (snprintf(full, sizeof full, "%.*s%s%s", (int)len, p, len ? "/" : "", file) < (int)sizeof full &&
            runnable(full))
            return 1;
        if (!end) return 0;
        p = end;
    }
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    /* One buffer for all pipes: a read is consumed before the next one starts. */
    static char block[65536];
    (void)h;
    (void)suggested;
    *buf = uv_buf_init(block, sizeof block);
}

static void on_pipe_closed(uv_handle_t *h)
{
    agent_worker *w = h->data;
    w->ag->handles_open--;
    agent_round_maybe_over(w->ag);
}

static void on_read(uv_stream_t *s, ssize_t n, const uv_buf_t *buf)
{
    agent_worker *w = s->data;
    int stream = s == (uv_stream_t *)&w->pipes[1] ? AGENT_STDERR : AGENT_STDOUT;
    if (n > 0) {
        agent_output_write(w->out, stream, buf->base, (size_t)n);
        return;
    }
    if (n < 0) {
        /* EOF or error: nothing more comes from this stream. */
        if (w->pipe_open[stream]) {
            w->pipe_open[stream] = 0;
            uv_close((uv_handle_t *)s, on_pipe_closed);
        }
    }
}

static void on_proc_closed(uv_handle_t *h)
{
    agent_worker *w = h->data;
    w->ag->handles_open--;
    agent_round_maybe_over(w->ag);
}

/* Reads what the worker left in a pipe before it exited, then closes the pipe:
 * its output is complete for the report, and a grandchild that keeps the pipe
 * open cannot hold the agent. */
static void drain_and_close(agent_worker *w, int stream)
{
    if (!w->pipe_open[stream]) return;
    uv_os_fd_t fd;
    uv_read_stop((uv_stream_t *)&w->pipes[stream]);
    if (uv_fileno((uv_handle_t *)&w->pipes[stream], &fd) == 0) {
        char buf[65536];
        size_t total = 0;
        while (total < (16u << 20)) { /* bound it: a grandchild may write forever */
            ssize_t r = read(fd, buf, sizeof buf);
            if (r < 0 && errno == EINTR) continue;
            if (r <= 0) break;
            agent_output_write(w->out, stream, buf, (size_t)r);
            total += (size_t)r;
        }
    }
    w->pipe_open[stream] = 0;
    uv_close((uv_handle_t *)&w->pipes[stream], on_pipe_closed);
}

static void on_exit_cb(uv_process_t *p, int64_t exit_status, int term_signal)
{
    agent_worker *w = p->data;
    drain_and_close(w, AGENT_STDOUT);
    drain_and_close(w, AGENT_STDERR);
    agent_output_flush(w->out);
    uv_close((uv_handle_t *)p, on_proc_closed);
    /* shared memory it made and was killed before naming away (shm_name.h) */
    shm_name_sweep(w->pid);
    agent_worker_exited(w, exit_status, term_signal);
}

/* Where a stream goes: console unless redirected (tee shows it anyway) and not
 * filtered out; a file when redirected or teed, or for both streams when only
 * --log-dir was given. */
static void output_cfg(const agent *ag, const agent_worker *w, agent_output_cfg *cfg,
                       char paths[2][AGENT_LOG_PATH_MAX])
{
    const launch_opts *o = ag->o;
    memset(cfg, 0, sizeof *cfg);
    snprintf(cfg->prefix, sizeof cfg->prefix, "[%s/%d]:", o->role, w->rank);
    cfg->bare[AGENT_STDOUT] = o->bare_rank0_stdout && w->rank == 0;
    launch_std red = launch_std_for(&o->redirects, w->local_rank);
    launch_std tee = launch_std_for(&o->tee, w->local_rank);
    int only_log_dir = !(o->set & (LAUNCH_SET_REDIRECTS | LAUNCH_SET_TEE));
    int shown = !o->has_ranks_filter ||
                (w->local_rank < LAUNCH_MAX_LOCAL && o->ranks_filter[w->local_rank]);
    static const char *names[2] = {"stdout", "stderr"};
    for (int s = 0; s < 2; s++) {
        int bit = s == AGENT_STDOUT ? LAUNCH_STD_OUT : LAUNCH_STD_ERR;
        int redirected = (red & bit) != 0, teed = (tee & bit) != 0;
        if (shown && (!redirected || teed)) cfg->console[s] = s == AGENT_STDOUT ? stdout : stderr;
        if (ag->log_root[0] && (redirected || teed || only_log_dir)) {
            snprintf(paths[s], AGENT_LOG_PATH_MAX, "%s/attempt_%d/%d/%s.log", ag->log_root,
                     ag->attempt, w->rank, names[s]);
            cfg->file[s] = paths[s];
        }
    }
}

static int spawn_one(agent *ag, agent_worker *w, int direct, char *err, size_t errlen)
{
    const launch_opts *o = ag->o;
    const rdzv_result *r = &ag->res;
    agent_output_cfg cfg;
    char paths[2][AGENT_LOG_PATH_MAX];
    output_cfg(ag, w, &cfg, paths);
    w->out = agent_output_open(&cfg, err, errlen);
    if (!w->out) return -1;
    if (agent_error_file_prepare(ag, w, err, errlen) != 0) return -1;
    /* The built-in trainer notes each collective it enters on a page we can
     * read even when it stops answering (a worker of another program ignores it). */
    int beacon_fd = -1;
    if (o->job_path) beacon_fd = beacon_create(&w->beacon);

    agent_env_info ei = {
        .role = o->role,
        .local_rank = w->local_rank,
        .local_world_size = ag->nworkers,
        .rank = w->rank,
        .world_size = r->world_size,
        .group_rank = r->node_rank,
        .group_world_size = r->nnodes,
        .role_rank = w->rank,
        .role_world_size = r->world_size,
        .master_addr = o->master_addr[0] ? o->master_addr : r->master_addr,
        .master_port = o->master_port ? o->master_port : r->master_port,
        /* torchrun counts failures only: admitting a new node is no restart */
        .restart_count = o->max_restarts - ag->restarts_left,
        .max_restarts = o->max_restarts,
        .attempt = ag->attempt,
        .restart_reason = ag->restart_reason,
        .run_id = r->run_id,
        .rdzv_host = ag->rdzv_host,
        .rdzv_port = ag->rdzv_port,
        .token = ag->token,
        .kv_prefix = r->kv_prefix,
        .omp_threads = ag->cores / (ag->nworkers > 0 ? ag->nworkers : 1),
        .agent_id = ag->agent_id,
        .beacon_fd = beacon_fd >= 0 ? 3 : 0, /* stdio[3] below */
        .error_file = w->error_file[0] ? w->error_file : NULL,
        /* the terminal decision is the agent's: the worker's own stdout is our pipe */
        .stdout_tty = agent_output_console_is_terminal(w->out, AGENT_STDOUT),
    };
    char **env = agent_env_build(environ, &ei);
    if (!env) {
        if (beacon_fd >= 0) close(beacon_fd);
        snprintf(err, errlen, "out of memory building a worker's environment");
        return -1;
    }

    int argc = 0;
    while (ag->argv[argc]) argc++;
    char **args = calloc((size_t)argc + 5, sizeof(char *));
    if (!args) {
        if (beacon_fd >= 0) close(beacon_fd);
        agent_env_free(env);
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    char pid_str[24];
    snprintf(pid_str, sizeof pid_str, "%ld", (long)getpid());
    static char guard_argv0[] = "dtrun", guard_flag[] = AGENT_CHILD_GUARD_FLAG;
    args[0] = guard_argv0;
    args[1] = guard_flag;
    args[2] = pid_str;
    args[3] = (char *)ag->file;
    for (int i = 0; i < argc; i++) args[4 + i] = ag->argv[i];

    for (int s = 0; s < 2; s++) {
        uv_pipe_init(&ag->loop, &w->pipes[s], 0);
        w->pipes[s].data = w;
        w->pipe_open[s] = 1;
        ag->handles_open++;
    }
    uv_stdio_container_t stdio[4];
    stdio[0].flags = UV_INHERIT_FD;
    stdio[0].data.fd = 0;
    stdio[3].flags = UV_INHERIT_FD;
    stdio[3].data.fd = beacon_fd;
    for (int s = 0; s < 2; s++) {
        stdio[1 + s].flags = UV_CREATE_PIPE | UV_WRITABLE_PIPE;
        stdio[1 + s].data.stream = (uv_stream_t *)&w->pipes[s];
    }
    uv_process_options_t po;
    memset(&po, 0, sizeof po);
    po.file = direct ? ag->file : "/proc/self/exe";
    po.args = direct ? (char **)ag->argv : args;
    po.env = env;
    po.exit_cb = on_exit_cb;
    po.stdio = stdio;
    po.stdio_count = beacon_fd >= 0 ? 4 : 3;
    /* A session (and so a process group) of its own: terminal signals reach only
     * the agent, which forwards them, and stopping a worker reaches its children. */
    po.flags = UV_PROCESS_DETACHED;
    w->proc.data = w;
    int rc = uv_spawn(&ag->loop, &w->proc, &po);
    if (beacon_fd >= 0) close(beacon_fd); /* the worker has its copy; ours is the mapping */
    agent_env_free(env);
    free(args);
    if (rc != 0) {
        snprintf(err, errlen, "cannot start worker rank %d: %s", w->rank, uv_strerror(rc));
        /* uv_spawn leaves the handle initialised on failure: close it and the pipes. */
        ag->handles_open++;
        uv_close((uv_handle_t *)&w->proc, on_proc_closed);
        for (int s = 0; s < 2; s++) {
            w->pipe_open[s] = 0;
            uv_close((uv_handle_t *)&w->pipes[s], on_pipe_closed);
        }
        return -1;
    }
    ag->handles_open++;
    w->pid = w->proc.pid;
    agent_watchdog_tell_group(ag, w->pid); /* a session leader: its pid is its group's id */
    w->running = 1;
    w->signals_sent = 0;
    ag->nrunning++;
    for (int s = 0; s < 2; s++) uv_read_start((uv_stream_t *)&w->pipes[s], on_alloc, on_read);
    return 0;
}

int agent_spawn_workers(agent *ag, char *err, size_t errlen)
{
    ag->nworkers = ag->o->nproc;
    ag->workers = calloc((size_t)ag->nworkers, sizeof *ag->workers);
    if (!ag->workers) { snprintf(err, errlen, "out of memory"); return -1; }
    for (int i = 0; i < ag->nworkers; i++) {
        agent_worker *w = &ag->workers[i];
        w->ag = ag;
        w->local_rank = i;
        w->rank = ag->res.rank_offset + i;
    }
    /* the guard's exec of dtrun costs each worker ~5 ms of CPU: only when needed */
    int direct = ag->watchdog_pid > 0 && program_resolves(ag->file);
    for (int i = 0; i < ag->nworkers; i++)
        if (spawn_one(ag, &ag->workers[i], direct, err, errlen) != 0) return -1;
    return 0;
}
