/* agent_impl.h — the agent's state, shared by lib/launch/agent*.c only.
 *
 *   agent.c            agent_run: the loop, rounds, the end
 *   agent_rdzv.c       hosting the daemon, joining, the exit barrier
 *   agent_spawn.c      starting workers (uv_spawn; the child guard when needed)
 *   agent_supervise.c  worker exits, signals, stopping, the root-cause report
 *   agent_watchdog.c   the watchdog that kills the workers and what they left behind
 *   agent_retry.c      which failures a restart can fix
 *   agent_error_file.c TORCHELASTIC_ERROR_FILE: each worker's, read for the report
 *
 * Everything runs on the agent's one libuv loop thread, except the blocking
 * rendezvous calls, which run on libuv's thread pool (uv_queue_work) so that
 * signals are still answered while an agent waits for the other nodes. */
#ifndef DTRUN_AGENT_IMPL_H
#define DTRUN_AGENT_IMPL_H

#include <stdint.h>
#include <sys/types.h>
#include <uv.h>

#include "lib/launch/agent.h"
#include "lib/launch/agent_output.h"
#include "lib/launch/launch_opts.h"
#include "lib/rdzv/rdzv.h"
#include "lib/util/beacon.h"

#define AGENT_LOG_PATH_MAX (JOB_PATH_MAX + LAUNCH_ID_MAX + 64)

typedef struct agent agent;

typedef struct {
    agent *ag;
    int local_rank, rank;
    pid_t pid;
    uv_process_t proc;
    uv_pipe_t pipes[2];        /* the worker's stdout, stderr */
    int pipe_open[2];
    agent_output *out;
    int running;               /* spawned, exit not yet seen */
    int exit_status;           /* as dtrun reports it: the code, or 128 + signal */
    int term_signal;           /* 0 when it exited */
    unsigned signals_sent;     /* bit s: dtrun sent it signal s (this round) */
    void *beacon;              /* its beacon page (lib/util/beacon.h); NULL none */
    int hung;                  /* found stopped (state T) while its peers failed */
    char last_coll[BEACON_TEXT_MAX]; /* its beacon when found hung */
    char error_file[AGENT_LOG_PATH_MAX + 16]; /* its TORCHELASTIC_ERROR_FILE; "" none */
    char error_line[256];      /* the last line of the traceback it wrote there; "" none */
} agent_worker;

typedef enum {
    AGENT_JOINING,     /* waiting for the rendezvous round */
    AGENT_RUNNING,     /* workers run */
    AGENT_STOPPING,    /* workers were told to stop; waiting for them to exit */
    AGENT_FINISHING,   /* workers done; waiting for the other nodes (exit barrier) */
    AGENT_DONE
} agent_state;

typedef enum {
    STOP_NONE,
    STOP_WORKER_FAILED,   /* one of ours failed */
    STOP_SIGNAL,          /* dtrun got SIGINT / SIGTERM / SIGHUP */
    STOP_REMOTE,          /* the round failed elsewhere (dead node, remote failure) */
    STOP_MEMBERSHIP,      /* a node waits to join: re-rendezvous, no restart used */
    STOP_SPAWN_FAILED     /* a worker could not be started */
} agent_stop_reason;

struct agent {
    const launch_opts *o;
    const char *file;
    char *const *argv;
    uv_loop_t loop;
    uv_signal_t signals[5];
    uv_timer_t term_timer;
    uv_poll_t *rdzv_poll;      /* the session's event fd; freed when closed */
    uv_work_t work;            /* the rendezvous call in flight */
    int work_busy;

    /* rendezvous */
    rdzv_server *server;       /* when this agent hosts the daemon */
    char rdzv_host[RDZV_MAX_NAME]; /* the daemon as this node reaches it */
    int rdzv_port;
    char endpoint[RDZV_MAX_NAME + 16];
    char token[RDZV_MAX_NAME];
    const char *node_addr;     /* told to the daemon: where other nodes reach us; NULL = seen */
    rdzv_session *session;
    rdzv_result res;
    char work_err[1024];
    int work_rc;

    /* the current round */
    int attempt;               /* TORCHELASTIC_RESTART_COUNT */
    int restarts_left;
    agent_worker *workers;
    int nworkers;
    int nrunning;              /* workers whose exit was not yet seen */
    int handles_open;          /* uv handles of this round not yet closed */
    agent_state state;
    agent_stop_reason stop_reason;
    int stop_signal;           /* the signal that stopped dtrun, for STOP_SIGNAL */
    int passed_signal;         /* the last SIGUSR1/SIGUSR2 passed on to the workers; 0 none */
    int stopped;               /* workers still running when the group was stopped */
    int first_failed;          /* index into workers, -1 none */
    int first_exit_status;     /* of the first worker seen failing (the peer of a hung one) */
    char remote_reason[512];
    char restart_reason[200];  /* why this attempt started ("" for the first): DTRUN_RESTART_REASON */
    char log_root[JOB_PATH_MAX + LAUNCH_ID_MAX + 8]; /* where --log-dir / -r / -t files go; "" none */
    char error_root[JOB_PATH_MAX + LAUNCH_ID_MAX + 8]; /* the workers' error files: log_root or a temp dir */
    int error_root_temp;       /* error_root is ours to remove at the end */
    int cores;

    /* the watchdog (agent_watchdog.c) */
    char agent_id[128];        /* DTRUN_AGENT_ID of every worker */
    int watchdog_fd;           /* the pipe's write end; -1 none */
    pid_t watchdog_pid;

    int exit_code;
};

/* agent.c */
void agent_round_maybe_over(agent *ag);   /* call whenever a worker or handle finished */
void agent_finish(agent *ag, int exit_code);
void agent_start_round(agent *ag);

/* agent_rdzv.c */
int agent_rdzv_setup(agent *ag, char *err, size_t errlen);
void agent_rdzv_join_async(agent *ag);    /* calls agent_rdzv_joined when done */
void agent_rdzv_joined(agent *ag);        /* agent.c: the round closed (or failed) */
void agent_rdzv_watch(agent *ag);         /* start polling the session's events */
void agent_rdzv_unwatch(agent *ag);
void agent_rdzv_exit_barrier_async(agent *ag); /* calls agent_finish when done */
void agent_rdzv_teardown(agent *ag);
/* A program launch on node 0: 0 when MASTER_PORT is free on this machine, else
 * -1 with one line naming what listens there (before any worker starts). */
int agent_check_master_port(agent *ag, char *err, size_t errlen);

/* agent_spawn.c */
int agent_spawn_workers(agent *ag, char *err, size_t errlen);

/* agent_retry.c */
/* What makes exit_status of a failed worker the same on every attempt (a short
 * phrase: "a data error"), or NULL when a restart may help. */
const char *agent_exit_deterministic(const agent *ag, int exit_status);
/* Ends the failure reason a node sends to the others when its failure is
 * deterministic: their agents do not restart either. */
#define AGENT_NO_RESTART_MARK " (a restart cannot change it)"

/* agent_error_file.c (program launches only; no-ops for the built-in trainer) */
/* Chooses w's error file (ATTEMPT/RANK/error.json under --log-dir, else a
 * private temp dir) and removes an old one. 0, or -1 with one line in err. */
int agent_error_file_prepare(agent *ag, agent_worker *w, char *err, size_t errlen);
/* w->error_line: the last line of the traceback w wrote, "" when none. */
void agent_error_file_read(agent_worker *w);
/* At the end of a failed job: w's file to dtrun's own TORCHELASTIC_ERROR_FILE, if set. */
void agent_error_file_to_parent(const agent *ag, const agent_worker *w, int exit_status);
/* Removes the temp dir (nothing under --log-dir). */
void agent_error_files_remove(agent *ag);

/* agent_watchdog.c */
void agent_watchdog_start(agent *ag);      /* first thing agent_run does */
void agent_watchdog_tell_group(agent *ag, pid_t pgid);
void agent_watchdog_finish(agent *ag);     /* last: the sweep, waited for up to 2 s */

/* agent_supervise.c */
void agent_signals_start(agent *ag);
void agent_signals_stop(agent *ag);
void agent_worker_exited(agent_worker *w, int64_t exit_status, int term_signal);
void agent_stop_workers(agent *ag, agent_stop_reason why, int sig);
void agent_kill_all(agent *ag, int sig);
void agent_print_root_cause(agent *ag);
/* "rank 1 exited with status 3" / "rank 0 killed by SIGKILL (signal 9)": the root cause in a few words. */
void agent_describe_root_cause(const agent *ag, char *buf, size_t n);
const char *agent_signal_name(int sig);

#endif
