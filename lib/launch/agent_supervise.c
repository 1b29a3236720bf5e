/* agent_supervise.c — watch the workers: their exits, dtrun's signals, stopping
 * the group (the signal, a grace period, SIGKILL) and the root-cause report. */
#include "lib/launch/agent_impl.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static const int FORWARDED[5] = {SIGINT, SIGTERM, SIGHUP, SIGUSR1, SIGUSR2};

const char *agent_signal_name(int sig)
{
    switch (sig) {
    case SIGHUP: return "SIGHUP";
    case SIGINT: return "SIGINT";
    case SIGQUIT: return "SIGQUIT";
    case SIGILL: return "SIGILL";
    case SIGTRAP: return "SIGTRAP";
    case SIGABRT: return "SIGABRT";
    case SIGBUS: return "SIGBUS";
    case SIGFPE: return "SIGFPE";
    case SIGKILL: return "SIGKILL";
    case SIGUSR1: return "SIGUSR1";
    case SIGSEGV: return "SIGSEGV";
    case SIGUSR2: return "SIGUSR2";
    case SIGPIPE: return "SIGPIPE";
    case SIGALRM: return "SIGALRM";
    case SIGTERM: return "SIGTERM";
    case SIGXCPU: return "SIGXCPU";
    default: return "a signal";
    }
}

/* The worker's process group: its children too, unless they left it. */
static void signal_worker(agent_worker *w, int sig)
{
    if (!w->running || w->pid <= 0) return;
    if (sig > 0 && sig < 32) w->signals_sent |= 1u << sig;
    if (kill(-w->pid, sig) != 0 && errno == ESRCH) kill(w->pid, sig);
}

void agent_kill_all(agent *ag, int sig)
{
    for (int i = 0; i < ag->nworkers; i++) signal_worker(&ag->workers[i], sig);
}

static void on_term_timer(uv_timer_t *t)
{
    agent *ag = t->data;
    if (ag->nrunning > 0) {
        fprintf(stderr, "dtrun: %d worker%s still running %g s after the stop signal; sending SIGKILL\n",
                ag->nrunning, ag->nrunning == 1 ? "" : "s", ag->o->term_timeout);
        agent_kill_all(ag, SIGKILL);
    }
}

void agent_stop_workers(agent *ag, agent_stop_reason why, int sig)
{
    if (ag->state == AGENT_RUNNING) {
        ag->state = AGENT_STOPPING;
        ag->stop_reason = why;
        ag->stopped = ag->nrunning;
    }
    agent_kill_all(ag, sig);
    if (!uv_is_active((uv_handle_t *)&ag->term_timer))
        uv_timer_start(&ag->term_timer, on_term_timer, (uint64_t)(ag->o->term_timeout * 1000.0), 0);
    agent_round_maybe_over(ag);
}

/* A worker that exited with a status may only be reacting to a peer that was
 * killed (its collective failed): libuv reports the exits it reaps together in
 * its own order, not in the order they happened. Peek (WNOWAIT: libuv still
 * reaps it) for a running worker already dead by a signal: that one is the
 * root cause. NULL when there is none. */
static agent_worker *worker_killed_meanwhile(agent *ag, const agent_worker *w)
{
    for (int i = 0; i < ag->nworkers; i++) {
        agent_worker *o = &ag->workers[i];
        if (o == w || !o->running || o->pid <= 0) continue;
        siginfo_t si;
        memset(&si, 0, sizeof si);
        if (waitid(P_PID, (id_t)o->pid, &si, WEXITED | WNOHANG | WNOWAIT) == 0 && si.si_pid == o->pid &&
            (si.si_code == CLD_KILLED || si.si_code == CLD_DUMPED))
            return o;
    }
    return NULL;
}

/* A running worker whose process is stopped (SIGSTOP, a debugger: state T or t
 * in /proc/PID/stat) while another failed: it stopped answering, and the
 * others' failure (a collective that timed out waiting for it) follows from
 * it. NULL when there is none. */
static agent_worker *worker_stopped_meanwhile(agent *ag, const agent_worker *w)
{
    for (int i = 0; i < ag->nworkers; i++) {
        agent_worker *o = &ag->workers[i];
        if (o == w || !o->running || o->pid <= 0) continue;
        char path[64], buf[512];
        snprintf(path, sizeof path, "/proc/%ld/stat", (long)o->pid);
        FILE *f = fopen(path, "r");
        if (!f) continue;
        size_t n = fread(buf, 1, sizeof buf - 1, f);
        fclose(f);
        buf[n] = 0;
        const char *p = strrchr(buf, ')'); /* the state follows the name */
        if (p && p[1] == ' ' && (p[2] == 'T' || p[2] == 't')) return o;
    }
    return NULL;
}

void agent_worker_exited(agent_worker *w, int64_t exit_status, int term_signal)
{
    agent *ag = w->ag;
    w->running = 0;
    ag->nrunning--;
    w->term_signal = term_signal;
    w->exit_status = term_signal ? 128 + term_signal : (int)(exit_status & 0xff);
    if (term_signal && term_signal == ag->passed_signal && ag->state == AGENT_RUNNING) {
        /* A program without a handler for the SIGUSR1 dtrun passed on (Slurm's
         * warning before the time limit) dies of it: the workers were asked
         * to stop, so stop them all, as for SIGTERM, and restart nothing. */
        fprintf(stderr, "dtrun: rank %d died of %s, which dtrun passed on to the workers (it has no handler for "
                "it): stopping the others; no restart\n", w->rank, agent_signal_name(term_signal));
        ag->stop_signal = term_signal;
        agent_stop_workers(ag, STOP_SIGNAL, SIGTERM);
        return;
    }
    if (term_signal && term_signal < 32 && !(w->signals_sent & (1u << term_signal)) && ag->first_failed >= 0 &&
        ag->state == AGENT_STOPPING && ag->stop_reason == STOP_WORKER_FAILED &&
        !ag->workers[ag->first_failed].term_signal && !ag->workers[ag->first_failed].hung) {
        /* Killed by a signal dtrun did not send, after a peer's exit was taken
         * as the first failure: libuv reaps the exits of one pass in its own
         * order, and when it reaped this one before that peer's callback ran,
         * worker_killed_meanwhile could not see it. A signal from outside is
         * the cause; the peer's exit (its collective failing) follows from it. */
        ag->first_failed = (int)(w - ag->workers);
        ag->first_exit_status = w->exit_status;
    }
    if (w->exit_status != 0 && ag->first_failed < 0 && ag->state == AGENT_RUNNING) {
        /* The first failure while the group ran is the root cause; what dies
         * after we stopped the group only follows from it. */
        ag->first_failed = (int)(w - ag->workers);
        ag->first_exit_status = w->exit_status;
        agent_worker *killed = term_signal ? NULL : worker_killed_meanwhile(ag, w);
        if (killed) {
            int sig;
            /* exit_status and term_signal of the killed one, as libuv will report them */
            siginfo_t si;
            memset(&si, 0, sizeof si);
            waitid(P_PID, (id_t)killed->pid, &si, WEXITED | WNOHANG | WNOWAIT);
            sig = si.si_status;
            killed->term_signal = sig;
            killed->exit_status = 128 + sig;
            ag->first_failed = (int)(killed - ag->workers);
            w = killed;
            term_signal = sig;
        }
        agent_worker *stopped = killed ? NULL : worker_stopped_meanwhile(ag, w);
        if (stopped) {
            stopped->hung = 1;
            beacon_read(stopped->beacon, stopped->last_coll, sizeof stopped->last_coll);
            ag->first_failed = (int)(stopped - ag->workers);
            w = stopped;
            /* A stopped process cannot act on SIGTERM: do not wait --term-timeout for it. */
            signal_worker(stopped, SIGKILL);
        }
        agent_error_file_read(w);
        if (ag->session) {
            char reason[512];
            if (stopped)
                snprintf(reason, sizeof reason, "worker rank %d stopped answering (its process is stopped)%s%s",
                         w->rank, w->last_coll[0] ? " in " : "", w->last_coll);
            else if (term_signal)
                snprintf(reason, sizeof reason, "worker rank %d was killed by %s", w->rank,
                         agent_signal_name(term_signal));
            else
                snprintf(reason, sizeof reason, "worker rank %d exited with status %d%s%s%s", w->rank,
                         w->exit_status, w->error_line[0] ? ": " : "", w->error_line,
                         agent_exit_deterministic(ag, w->exit_status) ? AGENT_NO_RESTART_MARK : "");
            rdzv_session_report_failure(ag->session, reason);
        }
        agent_stop_workers(ag, STOP_WORKER_FAILED, SIGTERM);
        return;
    }
    agent_round_maybe_over(ag);
}

/* "exited with status 1: ValueError: boom" (the traceback's last line from its
 * error file), "killed by SIGKILL (signal 9)". */
static void describe_exit(const agent_worker *w, char *buf, size_t n)
{
    if (w->term_signal)
        snprintf(buf, n, "killed by %s (signal %d)", agent_signal_name(w->term_signal), w->term_signal);
    else
        snprintf(buf, n, "exited with status %d%s%s", w->exit_status, w->error_line[0] ? ": " : "",
                 w->error_line);
}

void agent_describe_root_cause(const agent *ag, char *buf, size_t n)
{
    if (ag->first_failed < 0) {
        snprintf(buf, n, "a worker failed");
        return;
    }
    const agent_worker *w = &ag->workers[ag->first_failed];
    char how[320];
    if (w->hung) /* the agent's SIGKILL is not the cause: the rank had stopped answering */
        snprintf(how, sizeof how, "stopped answering (its process was stopped) and dtrun killed it");
    else
        describe_exit(w, how, sizeof how);
    snprintf(buf, n, "rank %d %s", w->rank, how);
}

void agent_print_root_cause(agent *ag)
{
    if (ag->first_failed < 0) return;
    const agent_worker *w = &ag->workers[ag->first_failed];
    char host[256] = "";
    gethostname(host, sizeof host - 1);
    char how[320 + BEACON_TEXT_MAX];
    if (w->hung)
        snprintf(how, sizeof how, "stopped answering (its process was stopped: SIGSTOP or a debugger; killed); "
                 "the last collective it entered: %s", w->last_coll[0] ? w->last_coll : "none noted");
    else
        describe_exit(w, how, sizeof how);
    time_t now = time(NULL);
    struct tm tm;
    char when[32];
    localtime_r(&now, &tm);
    strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S", &tm);
    fflush(stdout);
    fprintf(stderr,
            "dtrun: ---- root cause (first observed failure) ----\n"
            "dtrun:   rank %d (local rank %d, node rank %d, host %s, pid %ld), attempt %d, %s: %s\n",
            w->rank, w->local_rank, ag->res.node_rank, host, (long)w->pid, ag->attempt, when, how);
    /* kept under --log-dir only (a temp dir goes with the agent) */
    if (w->error_line[0] && !ag->error_root_temp) fprintf(stderr, "dtrun:   error file: %s\n", w->error_file);
    if (ag->stopped > 0)
        fprintf(stderr, "dtrun:   %d other worker%s of this node %s stopped\n", ag->stopped,
                ag->stopped == 1 ? "" : "s", ag->stopped == 1 ? "was" : "were");
    fprintf(stderr, "dtrun:   last lines of rank %d:\n", w->rank);
    if (agent_output_print_tail(w->out, stderr, "dtrun:     ") == 0)
        fprintf(stderr, "dtrun:     (no output)\n");
    fprintf(stderr, "dtrun: ----\n");
}

static void on_signal(uv_signal_t *h, int sig)
{
    agent *ag = h->data;
    if (sig == SIGUSR1 || sig == SIGUSR2) {
        /* e.g. Slurm's --signal=USR1@60 before preemption: the workers decide. */
        ag->passed_signal = sig;
        agent_kill_all(ag, sig);
        return;
    }
    if (ag->state == AGENT_JOINING || ag->state == AGENT_FINISHING) {
        /* No workers run; the blocking rendezvous call cannot be interrupted. */
        fprintf(stderr, "dtrun: %s: stopping while %s\n", agent_signal_name(sig),
                ag->state == AGENT_JOINING ? "waiting for the rendezvous" : "waiting for the other nodes");
        fflush(NULL);
        agent_rdzv_teardown(ag);
        agent_error_files_remove(ag);
        _exit(128 + sig);
    }
    if (ag->state == AGENT_STOPPING && ag->stop_reason == STOP_SIGNAL) {
        /* A second Ctrl-C: the user does not want to wait for the grace period. */
        fprintf(stderr, "dtrun: %s again: killing the workers\n", agent_signal_name(sig));
        agent_kill_all(ag, SIGKILL);
        return;
    }
    if (ag->state == AGENT_RUNNING || ag->state == AGENT_STOPPING) {
        ag->stop_signal = sig;
        /* Already stopping after a failure: the user's signal still means no restart. */
        if (ag->state == AGENT_STOPPING) ag->stop_reason = STOP_SIGNAL;
        agent_stop_workers(ag, STOP_SIGNAL, sig);
    }
}

void agent_signals_start(agent *ag)
{
    for (int i = 0; i < 5; i++) {
        uv_signal_init(&ag->loop, &ag->signals[i]);
        ag->signals[i].data = ag;
        uv_signal_start(&ag->signals[i], on_signal, FORWARDED[i]);
    }
}

void agent_signals_stop(agent *ag)
{
    for (int i = 0; i < 5; i++) uv_close((uv_handle_t *)&ag->signals[i], NULL);
}
