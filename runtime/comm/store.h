/* store.h — the tiny key-value store the communicators bootstrap through.
 *
 * Workers exchange shared-memory names, TCP endpoints and barriers through it,
 * never bulk data. Two implementations behind one interface:
 *   - kv:   the rendezvous daemon's KV store (lib/rdzv/kv.h), what production uses;
 *   - file: a shared directory (DTRUN_STORE=file:DIR), for tests and single-node
 *           runs without a daemon. Works across processes of one host (or a
 *           shared file system that renames atomically).
 * Every wait is bounded by a timeout in seconds; errors come back as -1 with one
 * line in store_last_error(). */
#ifndef DTRUN_COMM_STORE_H
#define DTRUN_COMM_STORE_H

#include <stddef.h>

typedef struct comm_store comm_store;

/* Largest value a key may hold (endpoints, names: small). */
#define STORE_VALUE_MAX 4096

/* Opens the store the environment names: DTRUN_STORE=file:DIR gives the file
 * store, DTRUN_STORE=kv or no DTRUN_STORE the KV client (kv_connect_env()).
 * NULL with one line in err on failure. */
comm_store *store_open_env(char *err, size_t errlen);

comm_store *store_file_open(const char *dir, char *err, size_t errlen);
comm_store *store_kv_open(char *err, size_t errlen);

/* Sets key to value (len bytes, at most STORE_VALUE_MAX). */
int store_set(comm_store *s, const char *key, const void *value, size_t len);

/* Waits until key exists (up to timeout_s), copies at most cap bytes into buf and
 * returns the value's length (which may exceed cap: then the value was cut). */
long store_get(comm_store *s, const char *key, void *buf, size_t cap, double timeout_s);

/* Atomically adds delta to the integer at key (missing = 0); *result gets the new
 * value. */
int store_add(comm_store *s, const char *key, long delta, long *result);

/* Returns once n participants have called it with the same name, or -1 after
 * timeout_s. Each name is for one use. */
int store_barrier(comm_store *s, const char *name, int n, double timeout_s);

const char *store_last_error(const comm_store *s);
void store_close(comm_store *s);

#endif
