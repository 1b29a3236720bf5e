/* agent.h — the per-node launcher agent.
 *
 * agent_run joins the rendezvous (hosting the daemon in-process when this node
 * is the endpoint, see man/dtrun.1 "RENDEZVOUS"), starts the node's workers with
 * torchrun's environment (lib/launch/agent_env.h), prints their output behind
 * "[role/rank]:" (lib/launch/agent_output.h), forwards signals, and on a failure stops
 * the group, prints the root cause and restarts it with a new rendezvous round
 * while --max-restarts allows. It returns dtrun's exit status.
 *
 * Workers, and what they start in turn, die with their agent even when it is
 * SIGKILLed: the agent's watchdog (a process of its own, lib/launch/agent_watchdog.c)
 * kills them when the agent ends, however it ends. Without a watchdog (it could
 * not be started), or for a program that does not resolve to an executable file,
 * each worker starts as `dtrun --dtrun-child-guard AGENT_PID FILE ARGV...`
 * (agent_child_guard_main), which sets PR_SET_PDEATHSIG(SIGKILL) and then execs
 * the program (libuv's uv_spawn has no hook between fork and exec, and the
 * death signal survives exec), or says in one line why it cannot. */
#ifndef DTRUN_AGENT_H
#define DTRUN_AGENT_H

#include "lib/launch/launch_opts.h"

#define AGENT_CHILD_GUARD_FLAG "--dtrun-child-guard"

/* Exit statuses of the agent itself (a worker's own status passes through). */
#include "lib/util/exit_codes.h"

/* Runs `file` with `argv` (NULL-terminated; argv[0] is what ps shows) as every
 * local worker. For the built-in trainer: file "/proc/self/exe", argv
 * {"dtrun", "worker", JOB, NULL}. */
int agent_run(const launch_opts *o, const char *file, char *const *argv);

/* The child side of the guard: argv = {_, AGENT_CHILD_GUARD_FLAG, PID, FILE, ARGV...}.
 * Execs FILE, or returns 127 (not found) / 126 (not executable) after one line. */
int agent_child_guard_main(int argc, char **argv);

#endif
