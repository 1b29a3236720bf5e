/* rdzv_cmd.h — `dtrun rdzv`: the standalone rendezvous daemon.
 *
 *   dtrun rdzv --listen HOST:PORT [--token T | --rdzv-id T] [--run-id ID]
 *              [--nnodes MIN[:MAX] | --min-nodes N --max-nodes M]
 *              [--join-timeout S] [--last-call S] [--heartbeat-timeout S]
 *              [--port-file FILE] [--quiet]
 *
 * PORT 0 picks a free port. Once listening it prints one line on stdout,
 * "dtrun rdzv: listening on HOST:PORT", and writes PORT to --port-file if given;
 * then it serves until SIGINT, SIGTERM or SIGHUP (exit 0). The token defaults to
 * $DTRUN_RDZV_TOKEN. Exit 2 for a bad option (one line naming it), 1 when it
 * cannot listen. */
#ifndef DTRUN_RDZV_CMD_H
#define DTRUN_RDZV_CMD_H

#include "lib/util/exit_codes.h"

/* argv[0] is "rdzv" (the subcommand); options follow. Returns the exit status. */
int rdzv_command(int argc, char **argv);

#endif
