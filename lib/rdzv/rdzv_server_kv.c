/* rdzv_server_kv.c — the daemon's answers to the workers' KV requests (set,
 * get, wait, add, compare-and-set, delete, barrier) over the table in
 * kv_store.c. A GET or WAIT for a key not yet there, and a barrier not yet
 * full, wait: one waiter per connection, answered when a change satisfies it
 * or by the tick when its deadline passes. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "lib/rdzv/kv.h"
#include "lib/rdzv/rdzv_server_internal.h"
#include "lib/util/clock.h"

static void waiter_free(rdzv_server *s, waiter *w)
{
    if (w->prev) w->prev->next = w->next; else s->waiters = w->next;
    if (w->next) w->next->prev = w->prev;
    if (w->c) w->c->wait = NULL;
    for (int k = 0; k < w->nkeys; k++) free(w->keys[k]);
    free(w->keys);
    free(w);
}

static void barrier_release(rdzv_server *s, barrier *b)
{
    barrier **pp = &s->barriers;
    while (*pp && *pp != b) pp = &(*pp)->next;
    if (*pp) *pp = b->next;
    free(b->name);
    free(b);
}

static waiter *waiter_add(rdzv_server *s, conn *c, int type, int64_t timeout_ms)
{
    waiter *w = calloc(1, sizeof *w);
    if (!w) return NULL;
    w->c = c;
    w->type = type;
    w->started = clock_now_ms();
    w->deadline = w->started + timeout_ms;
    w->next = s->waiters;
    if (s->waiters) s->waiters->prev = w;
    s->waiters = w;
    c->wait = w;
    return w;
}

/* A participant leaves a barrier without it completing (timeout, disconnect). */
static void barrier_leave(rdzv_server *s, waiter *w)
{
    if (!w->b) return;
    if (--w->b->arrived <= 0) barrier_release(s, w->b);
    w->b = NULL;
}

static int all_present(rdzv_server *s, waiter *w)
{
    const uint8_t *v;
    size_t len;
    for (int k = 0; k < w->nkeys; k++)
        if (!kv_store_get(s->kv, w->keys[k], &v, &len)) return 0;
    return 1;
}

/* Completes the GET / WAIT requests a change may have satisfied. */
static void wake_waiters(rdzv_server *s)
{
    waiter *w = s->waiters;
    while (w) {
        waiter *next = w->next;
        const uint8_t *v;
        size_t len;
        if (w->type == FRAME_KV_GET && kv_store_get(s->kv, w->keys[0], &v, &len)) {
            srv_conn_reply(w->c, KV_OK, 0, v, len, NULL);
            waiter_free(s, w);
        } else if (w->type == FRAME_KV_WAIT && all_present(s, w)) {
            srv_conn_reply(w->c, KV_OK, 0, NULL, 0, NULL);
            waiter_free(s, w);
        }
        w = next;
    }
}

static void waiter_timeout(rdzv_server *s, waiter *w)
{
    char msg[FRAME_MAX_TEXT];
    double secs = (double)(w->deadline - w->started) / 1000.0;
    if (w->type == FRAME_KV_BARRIER) {
        snprintf(msg, sizeof msg, "timed out after %.1f s: %d of %d arrived", secs, w->b->arrived, w->b->count);
        barrier_leave(s, w);
    } else if (w->type == FRAME_KV_WAIT) {
        size_t used = (size_t)snprintf(msg, sizeof msg, "timed out after %.1f s; missing keys:", secs);
        const uint8_t *v;
        size_t len;
        int shown = 0, missing = 0;
        for (int k = 0; k < w->nkeys; k++) {
            if (kv_store_get(s->kv, w->keys[k], &v, &len)) continue;
            missing++;
            if (used + strlen(w->keys[k]) + 40 < sizeof msg && shown < 20) {
                used += (size_t)snprintf(msg + used, sizeof msg - used, " '%s'", w->keys[k]);
                shown++;
            }
        }
        if (shown < missing) snprintf(msg + used, sizeof msg - used, " … and %d more", missing - shown);
    } else {
        snprintf(msg, sizeof msg, "timed out after %.1f s", secs);
    }
    srv_conn_reply(w->c, KV_ETIMEDOUT, 0, NULL, 0, msg);
    waiter_free(s, w);
}

static int parse_i64(const uint8_t *v, size_t len, int64_t *out)
{
    char buf[32];
    if (len == 0 || len >= sizeof buf) return -1;
    memcpy(buf, v, len);
    buf[len] = '\0';
    char *end;
    errno = 0;
    long long x = strtoll(buf, &end, 10);
    if (errno || *end || end == buf) return -1;
    *out = x;
    return 0;
}

static int copy_keys(waiter *w, const frame_str *keys, int n)
{
    w->keys = calloc((size_t)n, sizeof *w->keys);
    if (!w->keys) return -1;
    for (int k = 0; k < n; k++) {
        if (!(w->keys[k] = strdup(keys[k].p))) return -1;
        w->nkeys++;
    }
    return 0;
}

void srv_kv_handle(rdzv_server *s, conn *c, const frame_msg *m)
{
    const uint8_t *v;
    size_t len;
    switch (m->type) {
    case FRAME_KV_SET:
        if (!m->s[KV_SET_S_KEY].len) { srv_conn_reply(c, KV_EINVAL, 0, NULL, 0, "empty key"); return; }
        if (kv_store_set(s->kv, m->s[KV_SET_S_KEY].p, m->s[KV_SET_S_VALUE].p, m->s[KV_SET_S_VALUE].len) != 0) {
            srv_conn_reply(c, KV_EIO, 0, NULL, 0, "daemon out of memory");
            return;
        }
        srv_conn_reply(c, KV_OK, 0, NULL, 0, NULL);
        wake_waiters(s);
        return;
    case FRAME_KV_GET: {
        const char *key = m->s[KV_GET_S_KEY].p;
        int64_t t = m->i[KV_GET_I_TIMEOUT_MS];
        if (!*key || t < 0 || t > RDZV_MAX_WAIT_MS) { srv_conn_reply(c, KV_EINVAL, 0, NULL, 0, "empty key or bad timeout"); return; }
        if (kv_store_get(s->kv, key, &v, &len)) { srv_conn_reply(c, KV_OK, 0, v, len, NULL); return; }
        if (t == 0) { srv_conn_reply(c, KV_ENOTFOUND, 0, NULL, 0, "no such key"); return; }
        waiter *w = waiter_add(s, c, FRAME_KV_GET, t);
        frame_str k1 = m->s[KV_GET_S_KEY];
        if (!w || copy_keys(w, &k1, 1) != 0) { if (w) waiter_free(s, w); srv_conn_reply(c, KV_EIO, 0, NULL, 0, "daemon out of memory"); }
        return;
    }
    case FRAME_KV_WAIT: {
        int64_t t = m->i[KV_WAIT_I_TIMEOUT_MS];
        if (t < 0 || t > RDZV_MAX_WAIT_MS) { srv_conn_reply(c, KV_EINVAL, 0, NULL, 0, "bad timeout"); return; }
        waiter *w = waiter_add(s, c, FRAME_KV_WAIT, t);
        if (!w || copy_keys(w, m->list, (int)m->nlist) != 0) {
            if (w) waiter_free(s, w);
            srv_conn_reply(c, KV_EIO, 0, NULL, 0, "daemon out of memory");
            return;
        }
        if (all_present(s, w)) { srv_conn_reply(c, KV_OK, 0, NULL, 0, NULL); waiter_free(s, w); }
        else if (t == 0) waiter_timeout(s, w);
        return;
    }
    case FRAME_KV_ADD: {
        const char *key = m->s[KV_ADD_S_KEY].p;
        int64_t cur = 0, res;
        if (!*key) { srv_conn_reply(c, KV_EINVAL, 0, NULL, 0, "empty key"); return; }
        if (kv_store_get(s->kv, key, &v, &len) && parse_i64(v, len, &cur) != 0) {
            srv_conn_reply(c, KV_EINVAL, 0, NULL, 0, "the value is not an integer");
            return;
        }
        if (__builtin_add_overflow(cur, m->i[KV_ADD_I_DELTA], &res)) {
            srv_conn_reply(c, KV_EINVAL, 0, NULL, 0, "integer overflow");
            return;
        }
        char num[32];
        int nl = snprintf(num, sizeof num, "%lld", (long long)res);
        if (kv_store_set(s->kv, key, num, (size_t)nl) != 0) { srv_conn_reply(c, KV_EIO, 0, NULL, 0, "daemon out of memory"); return; }
        srv_conn_reply(c, KV_OK, res, NULL, 0, NULL);
        wake_waiters(s);
        return;
    }
    case FRAME_KV_CAS: {
        const char *key = m->s[KV_CAS_S_KEY].p;
        if (!*key) { srv_conn_reply(c, KV_EINVAL, 0, NULL, 0, "empty key"); return; }
        int present = kv_store_get(s->kv, key, &v, &len);
        const frame_str *exp = &m->s[KV_CAS_S_EXPECTED], *des = &m->s[KV_CAS_S_DESIRED];
        int match = m->i[KV_CAS_I_EXPECT_ABSENT] ? !present
                  : present && len == exp->len && (len == 0 || memcmp(v, exp->p, len) == 0);
        if (match) {
            if (kv_store_set(s->kv, key, des->p, des->len) != 0) { srv_conn_reply(c, KV_EIO, 0, NULL, 0, "daemon out of memory"); return; }
            kv_store_get(s->kv, key, &v, &len);
            srv_conn_reply(c, KV_OK, 1, v, len, NULL);
            wake_waiters(s);
        } else {
            srv_conn_reply(c, KV_OK, 0, present ? v : NULL, present ? len : 0, present ? NULL : "absent");
        }
        return;
    }
    case FRAME_KV_DELETE:
        if (kv_store_delete(s->kv, m->s[KV_DELETE_S_KEY].p)) srv_conn_reply(c, KV_OK, 0, NULL, 0, NULL);
        else srv_conn_reply(c, KV_ENOTFOUND, 0, NULL, 0, "no such key");
        return;
    case FRAME_KV_BARRIER: {
        const char *name = m->s[KV_BARRIER_S_NAME].p;
        int64_t count = m->i[KV_BARRIER_I_COUNT], t = m->i[KV_BARRIER_I_TIMEOUT_MS];
        if (!*name || count < 1 || count > RDZV_MAX_LOCAL || t < 0 || t > RDZV_MAX_WAIT_MS) {
            srv_conn_reply(c, KV_EINVAL, 0, NULL, 0, "empty name, bad count or bad timeout");
            return;
        }
        barrier *b = s->barriers;
        while (b && strcmp(b->name, name) != 0) b = b->next;
        if (b && b->count != count) {
            char msg[200];
            snprintf(msg, sizeof msg, "count %lld differs from the %d given by the %d participant%s waiting",
                     (long long)count, b->count, b->arrived, b->arrived == 1 ? "" : "s");
            srv_conn_reply(c, KV_EINVAL, 0, NULL, 0, msg);
            return;
        }
        if (count == 1) { srv_conn_reply(c, KV_OK, 1, NULL, 0, NULL); return; }
        if (!b) {
            b = calloc(1, sizeof *b);
            if (!b || !(b->name = strdup(name))) { free(b); srv_conn_reply(c, KV_EIO, 0, NULL, 0, "daemon out of memory"); return; }
            b->count = (int)count;
            b->next = s->barriers;
            s->barriers = b;
        }
        if (b->arrived + 1 == b->count) {
            /* Everyone is here: release the waiting ones and forget the barrier,
             * so the same name starts a fresh barrier next time. */
            waiter *w = s->waiters;
            while (w) {
                waiter *next = w->next;
                if (w->type == FRAME_KV_BARRIER && w->b == b) {
                    srv_conn_reply(w->c, KV_OK, b->count, NULL, 0, NULL);
                    w->b = NULL;
                    waiter_free(s, w);
                }
                w = next;
            }
            srv_conn_reply(c, KV_OK, b->count, NULL, 0, NULL);
            barrier_release(s, b);
            return;
        }
        waiter *w = waiter_add(s, c, FRAME_KV_BARRIER, t);
        if (!w) { srv_conn_reply(c, KV_EIO, 0, NULL, 0, "daemon out of memory"); return; }
        b->arrived++;
        w->b = b;
        if (t == 0) waiter_timeout(s, w);
        return;
    }
    }
}

/* The connection is going: its pending wait (and its place in a barrier) too. */
void srv_kv_conn_gone(rdzv_server *s, conn *c)
{
    waiter *w = c->wait;
    if (!w) return;
    barrier_leave(s, w);
    waiter_free(s, w);
}

/* KV waits past their deadline. */
void srv_kv_tick(rdzv_server *s, int64_t now)
{
    for (waiter *w = s->waiters, *next; w; w = next) {
        next = w->next;
        if (now >= w->deadline) waiter_timeout(s, w);
    }
}

void srv_kv_free_all(rdzv_server *s)
{
    while (s->waiters) {
        waiter *w = s->waiters;
        w->b = NULL;
        waiter_free(s, w);
    }
    while (s->barriers) barrier_release(s, s->barriers);
}
