/* kv_store.h — the daemon's key-value table (no I/O, no libuv; lib/rdzv/rdzv_server_kv.c
 * serves it). Keys are NUL-free text, values binary. */
#ifndef DTRUN_KV_STORE_H
#define DTRUN_KV_STORE_H

#include <stddef.h>
#include <stdint.h>

typedef struct kv_store kv_store;

kv_store *kv_store_new(void);
void kv_store_free(kv_store *st);

/* 1 and *val, *len (valid until the next change of that key) when present, else 0. */
int kv_store_get(const kv_store *st, const char *key, const uint8_t **val, size_t *len);

/* Sets (copies) key's value. 0, or -1 when out of memory. */
int kv_store_set(kv_store *st, const char *key, const void *val, size_t len);

/* Deletes key: 1 when it existed, 0 when not. */
int kv_store_delete(kv_store *st, const char *key);

/* Deletes every key that starts with prefix; returns how many. */
size_t kv_store_delete_prefix(kv_store *st, const char *prefix);

size_t kv_store_count(const kv_store *st);

#endif
