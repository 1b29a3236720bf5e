/* kv.h — blocking client of the rendezvous daemon's key-value store.
 *
 * Workers use it to bootstrap their communicators (NCCL unique ids, CPU transport
 * endpoints, barriers). It is plain BSD sockets and no libuv, so any process can
 * link it; a kv_client is used by one thread at a time (one request in flight).
 *
 * Every call that can block takes timeout_ms (> 0; the daemon enforces it and
 * answers in time, the client allows a little slack on top). Return values: 0 on
 * success, or a negative KV_E* code with one clear line in the client's error
 * buffer (kv_errmsg): what, why and where ("kv get 'x' at 10.0.0.1:29400: timed
 * out after 5.0 s"). After KV_EIO the connection is gone: kv_close it.
 *
 * Namespace. Every key is sent as PREFIX + key. The agent gives its workers the
 * round's namespace in DTRUN_KV_PREFIX (e.g. "round3/"), so a group restarted by
 * re-rendezvous never sees the keys of the failed attempt; the daemon deletes a
 * round's keys when the round fails or ends.
 *
 * Environment read by kv_connect_env() (set by the agent for every worker):
 *   DTRUN_KV_ENDPOINT  HOST:PORT of the daemon's KV store (IPv6 in brackets).
 *                      When unset: MASTER_ADDR and MASTER_PORT (the torchrun
 *                      names). The agent sets DTRUN_KV_ENDPOINT because under
 *                      `dtrun -- python …` MASTER_PORT belongs to PyTorch's own
 *                      TCPStore and is not the daemon.
 *   DTRUN_RDZV_TOKEN   the job token; must match the daemon's ("" if none).
 *   DTRUN_KV_PREFIX    the key namespace of the current round ("" if unset).
 *   DTRUN_KV_TIMEOUT   seconds to keep retrying the connect (default 60): workers
 *                      may start before the daemon listens.
 */
#ifndef DTRUN_KV_H
#define DTRUN_KV_H

#include <stddef.h>
#include <stdint.h>

#define KV_MAX_KEY    1024            /* bytes, prefix included */
#define KV_MAX_VALUE  (1024 * 1024)   /* bytes; values are binary-safe */

/* Return codes (negative). */
#define KV_OK          0
#define KV_ENOTFOUND  (-1)  /* kv_get with timeout 0 / kv_delete: no such key */
#define KV_ETIMEDOUT  (-2)  /* the wait / get / barrier timed out (connection stays usable) */
#define KV_EINVAL     (-3)  /* bad argument (key too long, value too big, count < 1 …) */
#define KV_EREFUSED   (-4)  /* the daemon refused: wrong job token, or an invalid request */
#define KV_EIO        (-5)  /* connection failed or lost; the client is unusable */
#define KV_ETOOSMALL  (-6)  /* kv_get: the value is larger than the buffer (*len says how big) */

typedef struct kv_client kv_client;

/* Connects to host:port and says hello with the token, retrying refused or
 * unreachable connects until timeout_ms passes (the daemon may start later).
 * NULL on failure with a line in err ("cannot reach rendezvous daemon at
 * [::1]:29400: connection refused (retried for 10.0 s)"). */
kv_client *kv_connect(const char *host, int port, const char *token, int timeout_ms,
                      char *err, size_t errlen);

/* Same, from the environment described above. */
kv_client *kv_connect_env(char *err, size_t errlen);

void kv_close(kv_client *c);

/* The key prefix (namespace), copied. "" = none. Returns KV_EINVAL if too long. */
int kv_set_prefix(kv_client *c, const char *prefix);
const char *kv_prefix(const kv_client *c);

/* The last error's line ("" after success). */
const char *kv_errmsg(const kv_client *c);

/* Sets key to value (len bytes, may contain NULs). */
int kv_set(kv_client *c, const char *key, const void *value, size_t len);
int kv_set_str(kv_client *c, const char *key, const char *value);

/* Gets key, blocking up to timeout_ms until some process sets it (timeout_ms = 0:
 * do not wait; KV_ENOTFOUND if absent). *len is the capacity of buf on entry and
 * the value's length on return; KV_ETOOSMALL when it did not fit. */
int kv_get(kv_client *c, const char *key, void *buf, size_t *len, int timeout_ms);
/* Same, NUL-terminating into a string buffer (values with NULs are cut there). */
int kv_get_str(kv_client *c, const char *key, char *buf, size_t buflen, int timeout_ms);

/* Waits until every key exists. On timeout the error names the missing keys. */
int kv_wait(kv_client *c, const char *const *keys, int nkeys, int timeout_ms);

/* Atomically adds delta to the integer at key (absent = 0) and stores the new
 * value in *result (may be NULL). The value is kept as decimal text, so kv_get
 * reads it too. KV_EINVAL if the existing value is not an integer. */
int kv_add(kv_client *c, const char *key, int64_t delta, int64_t *result);

/* Compare-and-set: if key's value equals expected (expected == NULL: the key is
 * absent), sets it to desired. *swapped (may be NULL) says whether it did. The
 * value after the operation is copied into cur/cur_len like kv_get (cur may be
 * NULL to skip). */
int kv_cas(kv_client *c, const char *key, const void *expected, size_t expected_len,
           const void *desired, size_t desired_len, int *swapped, void *cur, size_t *cur_len);

/* Deletes key; KV_ENOTFOUND if absent. */
int kv_delete(kv_client *c, const char *key);

/* Blocks until `count` participants called kv_barrier with the same name (names
 * are namespaced by the prefix). The barrier resets once released, so a name can
 * be reused for the next step. On timeout the error says how many arrived:
 * "kv barrier 'init' timed out after 5.0 s: 3 of 8 arrived". Every participant
 * must pass the same count (else KV_EINVAL). */
int kv_barrier(kv_client *c, const char *name, int count, int timeout_ms);

#endif
