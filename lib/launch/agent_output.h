/* agent_output.h — where one worker's stdout and stderr go.
 *
 * The agent reads each worker's two streams from pipes and hands the bytes here.
 * Each complete line goes to the console (the agent's own stdout or stderr)
 * behind the prefix "[role/RANK]:", unless the stream is redirected or the rank is
 * filtered out; to a log file verbatim when the stream is redirected or teed; and
 * into a small ring of the last lines, which the root-cause report prints when
 * the worker fails. No libuv here: the caller owns the pipes.
 *
 * Live lines. A carriage return inside a line (not a CRLF) starts the line
 * over, as on a terminal: what came before it is dropped, and the line so far
 * is drawn on the console behind the prefix without a newline ("\r\033[K"
 * first), redrawn at each carriage return, and cleared before any other line
 * reaches either console. That is how a worker's progress line (log.progress)
 * stays one line through the agent; the log files keep the bytes verbatim. */
#ifndef DTRUN_AGENT_OUTPUT_H
#define DTRUN_AGENT_OUTPUT_H

#include <stddef.h>
#include <stdio.h>

#define AGENT_OUTPUT_TAIL_LINES 20   /* lines kept for the failure report */
#define AGENT_OUTPUT_LINE_MAX 65536  /* a longer line is cut into pieces */

enum { AGENT_STDOUT = 0, AGENT_STDERR = 1 };

typedef struct {
    char prefix[96];          /* "[default/3]:" */
    int bare[2];              /* 1: this stream's console lines go without the prefix */
    FILE *console[2];         /* where each stream's lines go; NULL = not shown */
    const char *file[2];      /* log file per stream; NULL = none */
} agent_output_cfg;

typedef struct agent_output agent_output;

/* Creates the sink and its log files (parent directories too). NULL with one
 * line in err when a file cannot be created. */
agent_output *agent_output_open(const agent_output_cfg *cfg, char *err, size_t errlen);

/* Bytes the worker wrote on `stream`. Complete lines are emitted now; a partial
 * line waits for its newline (or agent_output_flush). */
void agent_output_write(agent_output *o, int stream, const char *buf, size_t n);

/* Whether the console of `stream` is a terminal (isatty): the agent tells
 * the worker (DTRUN_STDOUT_TTY), whose log.progress auto draws its live line
 * then. 0 when the stream is not shown. */
int agent_output_console_is_terminal(const agent_output *o, int stream);

/* Emits partial lines (at the worker's exit), as if they ended with a newline. */
void agent_output_flush(agent_output *o);

/* Prints the last lines of both streams, in the order they came, each behind
 * `indent` and the prefix. Returns how many lines were printed. */
int agent_output_print_tail(const agent_output *o, FILE *out, const char *indent);

/* Flushes, closes the files, frees. Safe with NULL. */
void agent_output_close(agent_output *o);

/* mkdir -p. 0, or -1 with errno set. */
int agent_mkdirs(const char *path);

#endif
