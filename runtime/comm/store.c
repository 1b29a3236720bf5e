/* store.c — picks the store the environment names, and the operations common to
 * every implementation (barrier from add + get, errors). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/env.h"
#include "runtime/comm/store_impl.h"

int store_fail(comm_store *s, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s->err, sizeof s->err, fmt, ap);
    va_end(ap);
    return -1;
}

comm_store *store_open_env(char *err, size_t errlen)
{
    const dt_env *env = dt_env_get();
    if (env->store == DT_ENV_STORE_KV)
        return store_kv_open(err, errlen);
    if (env->store == DT_ENV_STORE_FILE)
        return store_file_open(env->store_dir, err, errlen);
    snprintf(err, errlen, "DTRUN_STORE=%s: expected 'kv' or 'file:DIR'", env->store_raw);
    return NULL;
}

int store_set(comm_store *s, const char *key, const void *value, size_t len)
{
    if (len > STORE_VALUE_MAX)
        return store_fail(s, "store: value for '%s' is %zu bytes (max %d)", key, len,
                          STORE_VALUE_MAX);
    return s->ops->set(s, key, value, len);
}

long store_get(comm_store *s, const char *key, void *buf, size_t cap, double timeout_s)
{
    return s->ops->get(s, key, buf, cap, timeout_s);
}

int store_add(comm_store *s, const char *key, long delta, long *result)
{
    return s->ops->add(s, key, delta, result);
}

int store_barrier(comm_store *s, const char *name, int n, double timeout_s)
{
    if (s->ops->barrier)
        return s->ops->barrier(s, name, n, timeout_s);
    /* Count arrivals; the last one to arrive publishes "done", everyone waits
     * for it. Needs only add + get, so any store gets a barrier. */
    char key[512];
    long arrived = 0;
    snprintf(key, sizeof key, "%s/count", name);
    if (store_add(s, key, 1, &arrived) != 0)
        return -1;
    snprintf(key, sizeof key, "%s/done", name);
    if (arrived == n && store_set(s, key, "1", 1) != 0)
        return -1;
    char v[8];
    if (store_get(s, key, v, sizeof v, timeout_s) < 0) {
        char why[sizeof s->err];
        snprintf(why, sizeof why, "%s", s->err);
        return store_fail(s, "barrier '%s' (this rank arrived %ld of %d): %s", name, arrived, n, why);
    }
    return 0;
}

const char *store_last_error(const comm_store *s)
{
    return s->err;
}

void store_close(comm_store *s)
{
    if (s)
        s->ops->close(s);
}
