/* shm_name.h — the names of the shared-memory segments dtrun's workers make
 * (runtime/comm's shm transport), in one place for the two sides that use
 * them: the worker that creates one, and the agent that removes what a dead
 * worker left behind.
 *
 * A segment is /dtrun.<pid>.<counter>.<nonce>, <pid> the process that made it
 * (rank 0 of its group). Every rank unlinks the name once the whole group has
 * mapped it, so a name outlives setup only when its maker was killed in the
 * middle of it (the agent stopping the other workers after one failed, kill
 * -9): the segment would then hold its megabytes of /dev/shm until reboot. */
#ifndef DTRUN_SHM_NAME_H
#define DTRUN_SHM_NAME_H

#include <stddef.h>
#include <sys/types.h>

/* Writes the name (for shm_open: with its leading '/') into out. */
void shm_name_format(char *out, size_t n, pid_t pid, unsigned counter, unsigned long nonce);

/* Unlinks every segment named for `pid`; returns how many went. */
int shm_name_sweep(pid_t pid);

#endif
