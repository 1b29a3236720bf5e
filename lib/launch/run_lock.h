/* run_lock.h — one run per checkpoint directory and per metrics file.
 *
 * Two runs writing the same checkpoint.dir race (one's retention deletes the
 * other's steps, saves collide), and two runs appending to one log.metrics
 * interleave broken JSON lines. The launcher takes an exclusive flock(2) on a
 * lock file before it spawns and holds it until it exits (through restarts);
 * the kernel drops it when the holder dies, however it dies, so a lock is never
 * stale. The lock file holds "pid PID host HOST" of the holder, for the line a
 * second run prints:
 *   checkpoint dir DIR: in use by another dtrun run (pid 123 on host vm; lock DIR/.dtrun.lock)
 * Lock files: DIR/.dtrun.lock for a checkpoint directory (created), and
 * .NAME.dtrun.lock beside a metrics file NAME, where DIR and NAME are the
 * resolved paths (realpath(3): every symbolic link followed, also a dangling
 * one to a file the worker will create), so two runs reaching one file through
 * different names take one lock. Hard links and bind mounts of one file are
 * distinct paths and are not recognised as one. */
#ifndef DTRUN_RUN_LOCK_H
#define DTRUN_RUN_LOCK_H

#include <stddef.h>

typedef struct run_lock run_lock;

/* what: "checkpoint.dir" or "log.metrics", for the message; is_dir: path is a
 * directory (created with its parents when missing) rather than a file.
 * Returns the held lock, or NULL with one line in err; *busy is 1 when another
 * process holds it (0: the lock file could not be made). */
run_lock *run_lock_take(const char *what, const char *path, int is_dir, int *busy, char *err, size_t errlen);

/* Releases the lock and frees it (NULL is fine); the lock file stays. */
void run_lock_release(run_lock *l);

#endif
