/* beacon.h — a worker's last words that need no words from it: one shared page
 * where the worker notes, at every collective it enters, which one ("all_reduce
 * #28 of group[0,1,2,3] (rank 2's collective #55)"), and its agent reads it. A rank that stops answering
 * (SIGSTOP, a debugger, a hang) cannot tell anyone where it stopped; its page
 * still can, and the agent's root-cause line names it.
 *
 * The agent creates the page (a memfd) for each worker it starts and hands it
 * over as an inherited descriptor named by DTRUN_BEACON_FD; the worker maps it
 * once (runtime/env.h reads the variable). Without it every call is a no-op. */
#ifndef DTRUN_UTIL_BEACON_H
#define DTRUN_UTIL_BEACON_H

#include <stddef.h>

#define BEACON_TEXT_MAX 240

/* The agent's side. beacon_create: a new page, its descriptor (close-on-exec;
 * the spawn maps it into the worker) and *map, or -1. beacon_read: the last
 * note into buf ("" when none or torn). beacon_unmap frees a map. */
int beacon_create(void **map);
void beacon_read(const void *map, char *buf, size_t len);
void beacon_unmap(void *map);

/* The worker's side: maps descriptor fd (from DTRUN_BEACON_FD; < 0: none);
 * beacon_note records text (thread-safe; a store, a copy and a store). */
void beacon_attach(int fd);
void beacon_note(const char *text);

#endif
