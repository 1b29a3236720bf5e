/* store_impl.h — what a store implementation provides (store_file.c, store_kv.c).
 * Private to runtime/comm: users see only store.h. */
#ifndef DTRUN_COMM_STORE_IMPL_H
#define DTRUN_COMM_STORE_IMPL_H

#include <stddef.h>

#include "runtime/comm/store.h"

typedef struct {
    int (*set)(comm_store *s, const char *key, const void *value, size_t len);
    long (*get)(comm_store *s, const char *key, void *buf, size_t cap, double timeout_s);
    int (*add)(comm_store *s, const char *key, long delta, long *result);
    /* NULL: store.c builds the barrier from add + get. */
    int (*barrier)(comm_store *s, const char *name, int n, double timeout_s);
    void (*close)(comm_store *s);
} store_ops;

/* Every implementation starts with this header. */
struct comm_store {
    const store_ops *ops;
    char err[512];
};

/* Writes one line into s->err (printf style); returns -1 so callers can
 * `return store_fail(s, ...)`. */
int store_fail(comm_store *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
