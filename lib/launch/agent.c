/* agent.c — agent_run: one loop, rendezvous rounds, the end of the job. */
#include "lib/launch/agent_impl.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void free_round(agent *ag)
{
    for (int i = 0; i < ag->nworkers; i++) {
        agent_output_close(ag->workers[i].out);
        beacon_unmap(ag->workers[i].beacon);
    }
    free(ag->workers);
    ag->workers = NULL;
    ag->nworkers = 0;
}

void agent_start_round(agent *ag)
{
    ag->state = AGENT_JOINING;
    ag->stop_reason = STOP_NONE;
    ag->first_failed = -1;
    ag->stopped = 0;
    ag->passed_signal = 0;
    ag->remote_reason[0] = 0;
    agent_rdzv_join_async(ag);
}

void agent_rdzv_joined(agent *ag)
{
    if (!ag->session) {
        fprintf(stderr, "dtrun: %s\n", ag->work_err[0] ? ag->work_err : "rendezvous failed");
        agent_finish(ag, DT_EXIT_FAIL);
        return;
    }
    ag->state = AGENT_RUNNING;
    agent_rdzv_watch(ag);
    char err[1024];
    /* A port taken before spawn: this node does not restart, so the others must not either. */
    int port_taken = agent_check_master_port(ag, err, sizeof err) != 0;
    if (port_taken || agent_spawn_workers(ag, err, sizeof err) != 0) {
        fprintf(stderr, "dtrun: %s\n", err);
        if (port_taken) strncat(err, AGENT_NO_RESTART_MARK, sizeof err - strlen(err) - 1);
        if (ag->session) rdzv_session_report_failure(ag->session, err);
        ag->first_failed = -1;
        agent_stop_workers(ag, STOP_SPAWN_FAILED, SIGKILL);
        ag->stop_reason = STOP_SPAWN_FAILED;
    }
    agent_round_maybe_over(ag);
}

static void restart(agent *ag, int counts, const char *reason)
{
    snprintf(ag->restart_reason, sizeof ag->restart_reason, "%s", reason);
    rdzv_session_close(ag->session, 0);
    ag->session = NULL;
    free_round(ag);
    ag->attempt++;
    if (counts) {
        ag->restarts_left--;
        fprintf(stderr, "dtrun: restarting the workers (restart %d of %d)\n",
                ag->o->max_restarts - ag->restarts_left, ag->o->max_restarts);
    }
    agent_start_round(ag);
}

void agent_round_maybe_over(agent *ag)
{
    if (ag->state != AGENT_RUNNING && ag->state != AGENT_STOPPING) return;
    if (ag->nrunning > 0 || ag->handles_open > 0) return;
    uv_timer_stop(&ag->term_timer);
    agent_rdzv_unwatch(ag);
    if (ag->state == AGENT_RUNNING) {
        /* Every worker exited 0. */
        free_round(ag);
        if (ag->res.nnodes > 1) {
            ag->state = AGENT_FINISHING;
            agent_rdzv_exit_barrier_async(ag);
        } else {
            agent_finish(ag, DT_EXIT_OK);
        }
        return;
    }
    int code = DT_EXIT_FAIL;
    switch (ag->stop_reason) {
    case STOP_WORKER_FAILED: {
        agent_print_root_cause(ag);
        const agent_worker *w = &ag->workers[ag->first_failed];
        /* A hung worker was killed by us: the job's status is what its peers
         * saw (the built-in trainer's 4, a collective that timed out). */
        code = w->hung ? ag->first_exit_status : w->exit_status;
        const char *why = agent_exit_deterministic(ag, code);
        if (ag->restarts_left > 0 && why) {
            fprintf(stderr, "dtrun: not restarting (%d of --max-restarts=%d left): rank %d exited with status %d, "
                            "%s, which a restart cannot change\n",
                    ag->restarts_left, ag->o->max_restarts, w->rank, code, why);
            break;
        }
        if (ag->restarts_left > 0) {
            char reason[256];
            agent_describe_root_cause(ag, reason, sizeof reason);
            restart(ag, 1, reason);
            return;
        }
        break;
    }
    case STOP_REMOTE:
        if (ag->restarts_left > 0 && strstr(ag->remote_reason, AGENT_NO_RESTART_MARK)) {
            fprintf(stderr, "dtrun: not restarting (%d of --max-restarts=%d left): %s\n", ag->restarts_left,
                    ag->o->max_restarts, ag->remote_reason);
            break;
        }
        if (ag->restarts_left > 0) { restart(ag, 1, ag->remote_reason); return; }
        fprintf(stderr, "dtrun: no restarts left (--max-restarts=%d) after: %s\n", ag->o->max_restarts,
                ag->remote_reason);
        break;
    case STOP_MEMBERSHIP:
        restart(ag, 0, "the nodes changed (a node joined or left)");
        return;
    case STOP_SIGNAL:
        code = 128 + ag->stop_signal;
        break;
    case STOP_SPAWN_FAILED:
    case STOP_NONE:
        break;
    }
    if (ag->stop_reason == STOP_WORKER_FAILED && ag->first_failed >= 0)
        agent_error_file_to_parent(ag, &ag->workers[ag->first_failed], code);
    free_round(ag);
    agent_finish(ag, code);
}

static void close_handle(uv_handle_t *h)
{
    if (!uv_is_closing(h)) uv_close(h, NULL);
}

void agent_finish(agent *ag, int exit_code)
{
    ag->exit_code = exit_code;
    ag->state = AGENT_DONE;
    agent_rdzv_teardown(ag);
    agent_signals_stop(ag);
    close_handle((uv_handle_t *)&ag->term_timer);
}

/* Where --log-dir, --redirects and --tee write: DIR/RUN_ID. Without --log-dir
 * but with -r/-t, a fresh directory under $TMPDIR, as torchrun does. */
static int setup_log_root(agent *ag, char *err, size_t errlen)
{
    const launch_opts *o = ag->o;
    int need = o->log_dir[0] || launch_std_for(&o->redirects, -1) || launch_std_for(&o->tee, -1);
    for (int r = 0; r < o->nproc && !need; r++)
        need = launch_std_for(&o->redirects, r) || launch_std_for(&o->tee, r);
    if (!need) return 0;
    char base[JOB_PATH_MAX];
    if (o->log_dir[0]) {
        snprintf(base, sizeof base, "%s", o->log_dir);
    } else {
        const char *tmp = getenv("TMPDIR");
        snprintf(base, sizeof base, "%s/dtrun-logs-XXXXXX", tmp && *tmp ? tmp : "/tmp");
        if (!mkdtemp(base)) {
            snprintf(err, errlen, "cannot create a log directory %s: %s", base, strerror(errno));
            return -1;
        }
        fprintf(stderr, "dtrun: worker logs in %s/%s\n", base, o->rdzv_id);
    }
    snprintf(ag->log_root, sizeof ag->log_root, "%s/%s", base, o->rdzv_id);
    if (agent_mkdirs(ag->log_root) != 0) {
        snprintf(err, errlen, "--log-dir: cannot create %s: %s", ag->log_root, strerror(errno));
        return -1;
    }
    return 0;
}

int agent_run(const launch_opts *o, const char *file, char *const *argv)
{
    agent *ag = calloc(1, sizeof *ag);
    if (!ag) { fprintf(stderr, "dtrun: out of memory\n"); return DT_EXIT_FAIL; }
    ag->o = o;
    ag->file = file;
    ag->argv = argv;
    ag->restarts_left = o->max_restarts;
    ag->first_failed = -1;
    ag->cores = launch_count_cpus();
    /* A closed console pipe must not kill the agent and orphan the workers. */
    signal(SIGPIPE, SIG_IGN);

    /* before any thread or worker exists */
    agent_watchdog_start(ag);

    char err[4096];
    if (setup_log_root(ag, err, sizeof err) != 0 || agent_rdzv_setup(ag, err, sizeof err) != 0) {
        fprintf(stderr, "dtrun: %s\n", err);
        agent_rdzv_teardown(ag);
        agent_watchdog_finish(ag);
        free(ag);
        return DT_EXIT_FAIL;
    }
    uv_loop_init(&ag->loop);
    uv_timer_init(&ag->loop, &ag->term_timer);
    ag->term_timer.data = ag;
    agent_signals_start(ag);
    agent_start_round(ag);
    uv_run(&ag->loop, UV_RUN_DEFAULT);
    int code = ag->exit_code;
    if (uv_loop_close(&ag->loop) != 0) {
        /* Should not happen; run once more so the last close callbacks fire. */
        uv_run(&ag->loop, UV_RUN_NOWAIT);
        uv_loop_close(&ag->loop);
    }
    agent_error_files_remove(ag);
    agent_watchdog_finish(ag);
    free(ag);
    fflush(stdout);
    return code;
}
