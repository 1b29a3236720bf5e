/* store_kv.c — the store on the rendezvous daemon's KV client (lib/rdzv/kv.h).
 *
 * The production path: the agent gives every worker DTRUN_KV_ENDPOINT, the job
 * token and the round's key prefix; kv_connect_env() reads them. A kv_client
 * serves one request at a time, so a mutex keeps concurrent communicator
 * creation from different threads apart. */
#include <limits.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "lib/rdzv/kv.h"
#include "runtime/comm/store_impl.h"

typedef struct {
    comm_store base;
    kv_client *kv;
    pthread_mutex_t mu;
} kv_store;

/* Seconds to the client's milliseconds: at least 1 (0 would mean "do not wait"). */
static int to_ms(double timeout_s)
{
    double ms = timeout_s * 1000.0;
    return ms < 1.0 ? 1 : ms > (double)INT_MAX ? INT_MAX : (int)ms;
}

static int kvs_fail(kv_store *ks)
{
    return store_fail(&ks->base, "%s", kv_errmsg(ks->kv));
}

static int kvs_set(comm_store *s, const char *key, const void *value, size_t len)
{
    kv_store *ks = (kv_store *)s;
    pthread_mutex_lock(&ks->mu);
    int rc = kv_set(ks->kv, key, value, len) == KV_OK ? 0 : kvs_fail(ks);
    pthread_mutex_unlock(&ks->mu);
    return rc;
}

static long kvs_get(comm_store *s, const char *key, void *buf, size_t cap, double timeout_s)
{
    kv_store *ks = (kv_store *)s;
    size_t len = cap;
    pthread_mutex_lock(&ks->mu);
    int rc = kv_get(ks->kv, key, buf, &len, to_ms(timeout_s));
    long out = (rc == KV_OK || rc == KV_ETOOSMALL) ? (long)len : kvs_fail(ks);
    pthread_mutex_unlock(&ks->mu);
    return out;
}

static int kvs_add(comm_store *s, const char *key, long delta, long *result)
{
    kv_store *ks = (kv_store *)s;
    int64_t r = 0;
    pthread_mutex_lock(&ks->mu);
    int rc = kv_add(ks->kv, key, (int64_t)delta, &r) == KV_OK ? 0 : kvs_fail(ks);
    pthread_mutex_unlock(&ks->mu);
    if (rc == 0 && result)
        *result = (long)r;
    return rc;
}

static int kvs_barrier(comm_store *s, const char *name, int n, double timeout_s)
{
    kv_store *ks = (kv_store *)s;
    pthread_mutex_lock(&ks->mu);
    int rc = kv_barrier(ks->kv, name, n, to_ms(timeout_s)) == KV_OK ? 0 : kvs_fail(ks);
    pthread_mutex_unlock(&ks->mu);
    return rc;
}

static void kvs_close(comm_store *s)
{
    kv_store *ks = (kv_store *)s;
    kv_close(ks->kv);
    pthread_mutex_destroy(&ks->mu);
    free(ks);
}

static const store_ops kv_ops = {
    .set = kvs_set, .get = kvs_get, .add = kvs_add, .barrier = kvs_barrier, .close = kvs_close,
};

comm_store *store_kv_open(char *err, size_t errlen)
{
    kv_client *kv = kv_connect_env(err, errlen);
    if (!kv)
        return NULL;
    kv_store *ks = calloc(1, sizeof *ks);
    if (!ks) {
        kv_close(kv);
        snprintf(err, errlen, "kv store: out of memory");
        return NULL;
    }
    ks->base.ops = &kv_ops;
    ks->kv = kv;
    pthread_mutex_init(&ks->mu, NULL);
    return &ks->base;
}
