/* rdzv_server.c — the rendezvous daemon and KV store on one libuv loop thread.
 *
 * Everything below runs on the loop thread except rdzv_server_start (which binds
 * before the thread exists, so errors and the port are known synchronously) and
 * rdzv_server_stop (which only signals the loop through a uv_async_t and joins).
 *
 * Time-based work (join / last-call deadlines, heartbeat timeouts, KV waits,
 * clients that never say hello) is done by one periodic tick rather than a
 * timer per object: a precision of RDZV_TICK_MS is plenty for timeouts counted
 * in seconds, and it keeps handle lifetimes trivial.
 *
 * A connection is released through conn_drop (immediately) or conn_refuse
 * (an ERROR frame first, then shutdown); both detach it from its round and
 * from any pending KV wait at once, so the rest of the server never sees a
 * half-closed connection. The memory goes in the uv_close callback. */
#include "lib/rdzv/rdzv.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "lib/rdzv/frame.h"
#include "lib/rdzv/kv.h"
#include "lib/rdzv/kv_store.h"
#include "lib/rdzv/rdzv_round.h"

#define RDZV_TICK_MS        50
#define RDZV_HELLO_MS       10000             /* a client must say who it is this soon */
#define RDZV_MAX_CONNS      8192
#define RDZV_MAX_BACKLOG    (16u << 20)       /* unsent reply bytes before a client is dropped */
#define RDZV_MAX_WAIT_MS    (7LL * 24 * 3600 * 1000)
#define RDZV_MAX_LOCAL      (1 << 20)
#define RDZV_STRANGER_MAX   16384             /* payload limit until the token is shown */

typedef struct conn conn;
typedef struct member member;
typedef struct round round;
typedef struct waiter waiter;
typedef struct barrier barrier;

enum { ROUND_JOINING, ROUND_ACTIVE };

struct member {
    conn *c;                 /* NULL once its connection is gone */
    char name[RDZV_MAX_NAME];
    char addr[RDZV_MAX_NAME];
    int hint, local_world, pid, attempt, master_port, join_timeout_ms;
    int node_rank;
    int64_t last_hb;
    int left;                /* sent LEAVE: finished cleanly */
};

struct round {
    int state;
    int number;              /* fixed when it closes */
    member **m;
    int n, cap;
    int64_t first_join, last_join;
    int join_timeout_ms;
};

struct conn {
    uv_tcp_t tcp;
    rdzv_server *srv;
    conn *prev, *next;
    frame_decoder *dec;
    char peer[80];           /* "ip:port" for log lines */
    char peer_ip[64];
    int authed, closing;
    int64_t connected_at;
    member *member;          /* the round membership this connection joined */
    waiter *wait;            /* its pending blocking KV request */
    size_t backlog;
};

struct waiter {
    conn *c;
    int type;                /* FRAME_KV_GET, FRAME_KV_WAIT, FRAME_KV_BARRIER */
    char **keys;
    int nkeys;
    barrier *b;
    int64_t started, deadline;
    waiter *prev, *next;
};

struct barrier {
    char *name;
    int count, arrived;
    barrier *next;
};

struct rdzv_server {
    uv_loop_t loop;
    uv_tcp_t listener;
    uv_timer_t tick;
    uv_async_t stop;
    uv_thread_t thread;
    int port;
    char *host, *token, *run_id;
    int min_nodes, max_nodes, join_timeout_ms, last_call_ms, hb_interval_ms, hb_timeout_ms;
    FILE *log;
    conn *conns;
    int nconns;
    waiter *waiters;
    barrier *barriers;
    kv_store *kv;
    round *joining;          /* accepting joins */
    round *active;           /* closed and running */
    int next_round;
    char readbuf[65536];
};

typedef struct {
    uv_write_t req;
    conn *c;
    size_t len;
    uint8_t *data;
} write_req;

static int64_t now_ms(rdzv_server *s)
{
    return (int64_t)uv_now(&s->loop);
}

static void srv_log(rdzv_server *s, const char *fmt, ...)
{
    if (!s->log) return;
    char line[1200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    fprintf(s->log, "dtrun rdzv: %s\n", line);
    fflush(s->log);
}

/* ------------------------------------------------------------------ sending */

static void conn_drop(conn *c, const char *why);

static void on_write(uv_write_t *req, int status)
{
    write_req *w = (write_req *)req;
    w->c->backlog -= w->len;
    free(w->data);
    free(w);
    (void)status; /* a failed write shows up as a read error / EOF */
}

static void conn_send(conn *c, int type, const int64_t *ints, const frame_str *strs,
                      const frame_str *list, uint32_t nlist)
{
    if (c->closing) return;
    frame_buf b = { 0 };
    if (frame_encode(&b, type, ints, strs, list, nlist) != 0) {
        frame_buf_free(&b);
        conn_drop(c, "reply does not fit a frame");
        return;
    }
    write_req *w = malloc(sizeof *w);
    if (!w) { frame_buf_free(&b); conn_drop(c, "out of memory"); return; }
    w->c = c;
    w->len = b.len;
    w->data = b.data;
    uv_buf_t ub = uv_buf_init((char *)b.data, (unsigned)b.len);
    if (uv_write(&w->req, (uv_stream_t *)&c->tcp, &ub, 1, on_write) != 0) {
        free(w->data);
        free(w);
        conn_drop(c, "write failed");
        return;
    }
    c->backlog += b.len;
    if (c->backlog > RDZV_MAX_BACKLOG) conn_drop(c, "does not read its replies");
}

static void reply(conn *c, int status, int64_t ival, const void *val, size_t len, const char *msg)
{
    int64_t ints[2] = { status, ival };
    frame_str strs[2] = { { val ? (const char *)val : "", (uint32_t)len }, FRAME_STR(msg ? msg : "") };
    conn_send(c, FRAME_REPLY, ints, strs, NULL, 0);
}

static void send_event(conn *c, int kind, int round_no, int node_rank, const char *msg)
{
    int64_t ints[3] = { kind, round_no, node_rank };
    frame_str strs[1] = { FRAME_STR(msg) };
    conn_send(c, FRAME_EVENT, ints, strs, NULL, 0);
}

/* ------------------------------------------------------------------ rounds */

static void round_free(round *r)
{
    if (!r) return;
    for (int i = 0; i < r->n; i++) {
        if (r->m[i]->c) r->m[i]->c->member = NULL;
        free(r->m[i]);
    }
    free(r->m);
    free(r);
}

static void purge_round_keys(rdzv_server *s, int number)
{
    char prefix[32];
    snprintf(prefix, sizeof prefix, "round%d/", number);
    size_t n = kv_store_delete_prefix(s->kv, prefix);
    if (n) srv_log(s, "deleted %zu keys of round %d", n, number);
}

static void round_try_close(rdzv_server *s);

/* The running round ended: nodes that waited meanwhile start their wait now,
 * and the last call restarts, so the nodes of the ended round have time to
 * rejoin instead of being left out by a round of only the waiting ones. */
static void reopen_joining(rdzv_server *s)
{
    if (!s->joining) return;
    s->joining->first_join = s->joining->last_join = now_ms(s);
    round_try_close(s);
}

/* The active round failed: tell every other live member, forget the round. */
static void round_fail(rdzv_server *s, member *culprit, int kind, const char *msg)
{
    round *r = s->active;
    /* A reported failure's text already names the round (agents print it as is). */
    if (!strncmp(msg, "round ", 6)) srv_log(s, "%s", msg);
    else srv_log(s, "round %d failed: %s", r->number, msg);
    for (int i = 0; i < r->n; i++) {
        member *m = r->m[i];
        if (m != culprit && m->c && !m->left)
            send_event(m->c, kind, r->number, culprit ? culprit->node_rank : -1, msg);
    }
    purge_round_keys(s, r->number);
    s->active = NULL;
    round_free(r);
    reopen_joining(s);
}

static void round_check_done(rdzv_server *s)
{
    round *r = s->active;
    if (!r) return;
    for (int i = 0; i < r->n; i++)
        if (!r->m[i]->left) return;
    srv_log(s, "round %d finished: every node left cleanly", r->number);
    purge_round_keys(s, r->number);
    s->active = NULL;
    round_free(r);
    reopen_joining(s);
}

static void round_close(rdzv_server *s)
{
    round *r = s->joining;
    int n = r->n;
    rdzv_round_node *nodes = calloc((size_t)n, sizeof *nodes);
    int *rank = calloc((size_t)n, sizeof *rank), *offset = calloc((size_t)n, sizeof *offset);
    frame_str *names = calloc((size_t)n, sizeof *names);
    if (!nodes || !rank || !offset || !names) goto out; /* retried on the next tick */
    for (int i = 0; i < n; i++)
        nodes[i] = (rdzv_round_node){ r->m[i]->name, r->m[i]->hint, r->m[i]->local_world };
    int world = 0;
    char err[300];
    if (rdzv_round_assign(nodes, n, rank, offset, &world, err, sizeof err) != 0) goto out; /* join checks prevent it */

    r->number = s->next_round++;
    r->state = ROUND_ACTIVE;
    s->active = r;
    s->joining = NULL;
    member *m0 = NULL;
    for (int i = 0; i < n; i++) {
        r->m[i]->node_rank = rank[i];
        r->m[i]->last_hb = now_ms(s);
        names[rank[i]] = FRAME_STR(r->m[i]->name);
        if (rank[i] == 0) m0 = r->m[i];
    }
    const char *maddr = m0->addr[0] ? m0->addr : m0->c ? m0->c->peer_ip : "127.0.0.1";
    int mport = m0->master_port ? m0->master_port : s->port;
    char prefix[32];
    snprintf(prefix, sizeof prefix, "round%d/", r->number);
    srv_log(s, "round %d closed: %d nodes, world size %d, master %s:%d", r->number, n, world, maddr, mport);
    for (int i = 0; i < n; i++) {
        int64_t ints[8] = { r->number, rank[i], n, offset[i], world, mport, s->hb_interval_ms, s->hb_timeout_ms };
        frame_str strs[3] = { FRAME_STR(maddr), FRAME_STR(s->run_id), FRAME_STR(prefix) };
        if (r->m[i]->c) conn_send(r->m[i]->c, FRAME_JOIN_OK, ints, strs, names, (uint32_t)n);
    }
out:
    free(nodes); free(rank); free(offset); free(names);
}

/* Closes the joining round if it may, else times it out if its deadline passed. */
static void round_try_close(rdzv_server *s)
{
    round *r = s->joining;
    if (!r || r->n == 0) return;
    int64_t now = now_ms(s);
    rdzv_round_node *nodes = calloc((size_t)r->n, sizeof *nodes);
    if (!nodes) return;
    for (int i = 0; i < r->n; i++)
        nodes[i] = (rdzv_round_node){ r->m[i]->name, r->m[i]->hint, r->m[i]->local_world };
    int need = rdzv_round_min_for_hints(nodes, r->n);
    if (need < s->min_nodes) need = s->min_nodes;
    if (!s->active && r->n >= need &&
        (r->n >= s->max_nodes || s->last_call_ms < 0 || now - r->last_join >= s->last_call_ms)) {
        free(nodes);
        round_close(s);
        return;
    }
    if (now - r->first_join < r->join_timeout_ms) { free(nodes); return; }

    char msg[700];
    rdzv_round_timeout_message(msg, sizeof msg, r->join_timeout_ms / 1000.0, nodes, r->n, s->min_nodes, need);
    if (s->active && r->n >= need)
        snprintf(msg, sizeof msg, "rendezvous timed out after %.1f s: %d node%s waited while round %d kept running "
                 "with %d of max %d nodes (its agents did not restart to admit them)", r->join_timeout_ms / 1000.0,
                 r->n, r->n == 1 ? "" : "s", s->active->number, s->active->n, s->max_nodes);
    free(nodes);
    srv_log(s, "%s", msg);
    /* Detach first: refusing a connection must not touch the round again. */
    s->joining = NULL;
    int n = r->n;
    conn **cs = calloc((size_t)n, sizeof *cs);
    for (int i = 0; cs && i < n; i++) cs[i] = r->m[i]->c;
    round_free(r);
    for (int i = 0; cs && i < n; i++) {
        if (!cs[i] || cs[i]->closing) continue;
        frame_str strs[1] = { FRAME_STR(msg) };
        conn_send(cs[i], FRAME_ERROR, NULL, strs, NULL, 0);
    }
    free(cs);
}

/* A member's connection is gone (EOF, error, dropped). */
static void member_lost(rdzv_server *s, member *m, const char *why)
{
    conn *c = m->c;
    m->c = NULL;
    if (c) c->member = NULL;
    if (s->joining) {
        round *r = s->joining;
        for (int i = 0; i < r->n; i++) {
            if (r->m[i] != m) continue;
            srv_log(s, "node %s left before the round closed (%s)", m->name, why);
            memmove(&r->m[i], &r->m[i + 1], (size_t)(r->n - i - 1) * sizeof *r->m);
            r->n--;
            free(m);
            if (r->n == 0) { round_free(r); s->joining = NULL; }
            return;
        }
    }
    if (s->active && !m->left) {
        char msg[600];
        snprintf(msg, sizeof msg, "node %s (rank %d) dead: %s", m->name, m->node_rank, why);
        round_fail(s, m, RDZV_EV_NODE_DEAD, msg);
    }
}

/* ------------------------------------------------------------------ KV */

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
    w->started = now_ms(s);
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
            reply(w->c, KV_OK, 0, v, len, NULL);
            waiter_free(s, w);
        } else if (w->type == FRAME_KV_WAIT && all_present(s, w)) {
            reply(w->c, KV_OK, 0, NULL, 0, NULL);
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
    reply(w->c, KV_ETIMEDOUT, 0, NULL, 0, msg);
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

static void handle_kv(rdzv_server *s, conn *c, const frame_msg *m)
{
    const uint8_t *v;
    size_t len;
    switch (m->type) {
    case FRAME_KV_SET:
        if (!m->s[KV_SET_S_KEY].len) { reply(c, KV_EINVAL, 0, NULL, 0, "empty key"); return; }
        if (kv_store_set(s->kv, m->s[KV_SET_S_KEY].p, m->s[KV_SET_S_VALUE].p, m->s[KV_SET_S_VALUE].len) != 0) {
            reply(c, KV_EIO, 0, NULL, 0, "daemon out of memory");
            return;
        }
        reply(c, KV_OK, 0, NULL, 0, NULL);
        wake_waiters(s);
        return;
    case FRAME_KV_GET: {
        const char *key = m->s[KV_GET_S_KEY].p;
        int64_t t = m->i[KV_GET_I_TIMEOUT_MS];
        if (!*key || t < 0 || t > RDZV_MAX_WAIT_MS) { reply(c, KV_EINVAL, 0, NULL, 0, "empty key or bad timeout"); return; }
        if (kv_store_get(s->kv, key, &v, &len)) { reply(c, KV_OK, 0, v, len, NULL); return; }
        if (t == 0) { reply(c, KV_ENOTFOUND, 0, NULL, 0, "no such key"); return; }
        waiter *w = waiter_add(s, c, FRAME_KV_GET, t);
        frame_str k1 = m->s[KV_GET_S_KEY];
        if (!w || copy_keys(w, &k1, 1) != 0) { if (w) waiter_free(s, w); reply(c, KV_EIO, 0, NULL, 0, "daemon out of memory"); }
        return;
    }
    case FRAME_KV_WAIT: {
        int64_t t = m->i[KV_WAIT_I_TIMEOUT_MS];
        if (t < 0 || t > RDZV_MAX_WAIT_MS) { reply(c, KV_EINVAL, 0, NULL, 0, "bad timeout"); return; }
        waiter *w = waiter_add(s, c, FRAME_KV_WAIT, t);
        if (!w || copy_keys(w, m->list, (int)m->nlist) != 0) {
            if (w) waiter_free(s, w);
            reply(c, KV_EIO, 0, NULL, 0, "daemon out of memory");
            return;
        }
        if (all_present(s, w)) { reply(c, KV_OK, 0, NULL, 0, NULL); waiter_free(s, w); }
        else if (t == 0) waiter_timeout(s, w);
        return;
    }
    case FRAME_KV_ADD: {
        const char *key = m->s[KV_ADD_S_KEY].p;
        int64_t cur = 0, res;
        if (!*key) { reply(c, KV_EINVAL, 0, NULL, 0, "empty key"); return; }
        if (kv_store_get(s->kv, key, &v, &len) && parse_i64(v, len, &cur) != 0) {
            reply(c, KV_EINVAL, 0, NULL, 0, "the value is not an integer");
            return;
        }
        if (__builtin_add_overflow(cur, m->i[KV_ADD_I_DELTA], &res)) {
            reply(c, KV_EINVAL, 0, NULL, 0, "integer overflow");
            return;
        }
        char num[32];
        int nl = snprintf(num, sizeof num, "%lld", (long long)res);
        if (kv_store_set(s->kv, key, num, (size_t)nl) != 0) { reply(c, KV_EIO, 0, NULL, 0, "daemon out of memory"); return; }
        reply(c, KV_OK, res, NULL, 0, NULL);
        wake_waiters(s);
        return;
    }
    case FRAME_KV_CAS: {
        const char *key = m->s[KV_CAS_S_KEY].p;
        if (!*key) { reply(c, KV_EINVAL, 0, NULL, 0, "empty key"); return; }
        int present = kv_store_get(s->kv, key, &v, &len);
        const frame_str *exp = &m->s[KV_CAS_S_EXPECTED], *des = &m->s[KV_CAS_S_DESIRED];
        int match = m->i[KV_CAS_I_EXPECT_ABSENT] ? !present
                  : present && len == exp->len && (len == 0 || memcmp(v, exp->p, len) == 0);
        if (match) {
            if (kv_store_set(s->kv, key, des->p, des->len) != 0) { reply(c, KV_EIO, 0, NULL, 0, "daemon out of memory"); return; }
            kv_store_get(s->kv, key, &v, &len);
            reply(c, KV_OK, 1, v, len, NULL);
            wake_waiters(s);
        } else {
            reply(c, KV_OK, 0, present ? v : NULL, present ? len : 0, present ? NULL : "absent");
        }
        return;
    }
    case FRAME_KV_DELETE:
        if (kv_store_delete(s->kv, m->s[KV_DELETE_S_KEY].p)) reply(c, KV_OK, 0, NULL, 0, NULL);
        else reply(c, KV_ENOTFOUND, 0, NULL, 0, "no such key");
        return;
    case FRAME_KV_BARRIER: {
        const char *name = m->s[KV_BARRIER_S_NAME].p;
        int64_t count = m->i[KV_BARRIER_I_COUNT], t = m->i[KV_BARRIER_I_TIMEOUT_MS];
        if (!*name || count < 1 || count > RDZV_MAX_LOCAL || t < 0 || t > RDZV_MAX_WAIT_MS) {
            reply(c, KV_EINVAL, 0, NULL, 0, "empty name, bad count or bad timeout");
            return;
        }
        barrier *b = s->barriers;
        while (b && strcmp(b->name, name) != 0) b = b->next;
        if (b && b->count != count) {
            char msg[200];
            snprintf(msg, sizeof msg, "count %lld differs from the %d given by the %d participants waiting",
                     (long long)count, b->count, b->arrived);
            reply(c, KV_EINVAL, 0, NULL, 0, msg);
            return;
        }
        if (count == 1) { reply(c, KV_OK, 1, NULL, 0, NULL); return; }
        if (!b) {
            b = calloc(1, sizeof *b);
            if (!b || !(b->name = strdup(name))) { free(b); reply(c, KV_EIO, 0, NULL, 0, "daemon out of memory"); return; }
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
                    reply(w->c, KV_OK, b->count, NULL, 0, NULL);
                    w->b = NULL;
                    waiter_free(s, w);
                }
                w = next;
            }
            reply(c, KV_OK, b->count, NULL, 0, NULL);
            barrier_release(s, b);
            return;
        }
        waiter *w = waiter_add(s, c, FRAME_KV_BARRIER, t);
        if (!w) { reply(c, KV_EIO, 0, NULL, 0, "daemon out of memory"); return; }
        b->arrived++;
        w->b = b;
        if (t == 0) waiter_timeout(s, w);
        return;
    }
    }
}

/* ------------------------------------------------------------------ connections */

static void on_close(uv_handle_t *h)
{
    conn *c = (conn *)h;
    frame_decoder_free(c->dec);
    free(c);
}

/* Detaches c from everything that refers to it and unlinks it. */
static void conn_detach(conn *c, const char *why)
{
    rdzv_server *s = c->srv;
    c->closing = 1;
    if (c->wait) {
        waiter *w = c->wait;
        barrier_leave(s, w);
        waiter_free(s, w);
    }
    if (c->member) member_lost(s, c->member, why);
    if (c->prev) c->prev->next = c->next; else s->conns = c->next;
    if (c->next) c->next->prev = c->prev;
    c->prev = c->next = NULL;
    s->nconns--;
}

static void conn_drop(conn *c, const char *why)
{
    if (c->closing) return;
    if (why) srv_log(c->srv, "dropping client %s: %s", c->peer, why);
    conn_detach(c, why ? why : "connection lost");
    uv_close((uv_handle_t *)&c->tcp, on_close);
}

static void on_shutdown(uv_shutdown_t *req, int status)
{
    conn *c = req->data;
    free(req);
    (void)status;
    if (!uv_is_closing((uv_handle_t *)&c->tcp)) uv_close((uv_handle_t *)&c->tcp, on_close);
}

/* Sends ERROR(reason), then closes once it is written. */
static void conn_refuse(conn *c, const char *reason)
{
    if (c->closing) return;
    srv_log(c->srv, "refused client %s: %s", c->peer, reason);
    frame_str strs[1] = { FRAME_STR(reason) };
    conn_send(c, FRAME_ERROR, NULL, strs, NULL, 0);
    if (c->closing) return;
    conn_detach(c, reason);
    uv_read_stop((uv_stream_t *)&c->tcp);
    uv_shutdown_t *req = malloc(sizeof *req);
    if (req) req->data = c;
    if (!req || uv_shutdown(req, (uv_stream_t *)&c->tcp, on_shutdown) != 0) {
        free(req);
        uv_close((uv_handle_t *)&c->tcp, on_close);
    }
}

static int token_ok(rdzv_server *s, const frame_str *t)
{
    /* Compare every byte whatever the first mismatch, so timing says nothing. */
    size_t n = strlen(s->token);
    unsigned diff = (unsigned)(n != t->len);
    for (size_t i = 0; i < n; i++) diff |= (unsigned char)s->token[i] ^ (unsigned char)(i < t->len ? t->p[i] : 0);
    return diff == 0;
}

static void handle_join(rdzv_server *s, conn *c, const frame_msg *m)
{
    char msg[600];
    if (c->member) { conn_refuse(c, "JOIN sent twice on one connection"); return; }
    int64_t hint = m->i[JOIN_I_NODE_RANK], lw = m->i[JOIN_I_LOCAL_WORLD], mp = m->i[JOIN_I_MASTER_PORT];
    int64_t jt = m->i[JOIN_I_JOIN_TIMEOUT_MS];
    const char *name = m->s[JOIN_S_NAME].len ? m->s[JOIN_S_NAME].p : c->peer_ip;
    if (lw < 1 || lw > RDZV_MAX_LOCAL) {
        snprintf(msg, sizeof msg, "local world size %lld of node %s is out of range 1-%d", (long long)lw, name, RDZV_MAX_LOCAL);
        conn_refuse(c, msg);
        return;
    }
    if (hint < -1 || hint >= s->max_nodes) {
        snprintf(msg, sizeof msg, "node rank %lld of node %s is out of range: the job has %d node%s at most",
                 (long long)hint, name, s->max_nodes, s->max_nodes == 1 ? "" : "s");
        conn_refuse(c, msg);
        return;
    }
    if (mp < 0 || mp > 65535 || jt < 0 || jt > RDZV_MAX_WAIT_MS || m->s[JOIN_S_NAME].len >= RDZV_MAX_NAME ||
        m->s[JOIN_S_ADDR].len >= RDZV_MAX_NAME) {
        conn_refuse(c, "JOIN with a bad master port, join timeout, name or address");
        return;
    }
    if (!s->joining) {
        s->joining = calloc(1, sizeof *s->joining);
        if (!s->joining) { conn_refuse(c, "daemon out of memory"); return; }
    }
    round *r = s->joining;
    if (r->n >= s->max_nodes) {
        snprintf(msg, sizeof msg, "rendezvous is full: %d of max %d nodes already wait for the next round", r->n, s->max_nodes);
        conn_refuse(c, msg);
        return;
    }
    for (int i = 0; hint >= 0 && i < r->n; i++) {
        if (r->m[i]->hint == hint) {
            snprintf(msg, sizeof msg, "node rank %lld already taken by %s (%s)", (long long)hint, r->m[i]->name,
                     r->m[i]->c ? r->m[i]->c->peer_ip : "?");
            conn_refuse(c, msg);
            return;
        }
    }
    if (r->n == r->cap) {
        int cap = r->cap ? r->cap * 2 : 8;
        member **p = realloc(r->m, (size_t)cap * sizeof *p);
        if (!p) { conn_refuse(c, "daemon out of memory"); return; }
        r->m = p;
        r->cap = cap;
    }
    member *mb = calloc(1, sizeof *mb);
    if (!mb) { conn_refuse(c, "daemon out of memory"); return; }
    mb->c = c;
    snprintf(mb->name, sizeof mb->name, "%s", name);
    snprintf(mb->addr, sizeof mb->addr, "%s", m->s[JOIN_S_ADDR].p);
    mb->hint = (int)hint;
    mb->local_world = (int)lw;
    mb->pid = (int)m->i[JOIN_I_PID];
    mb->attempt = (int)m->i[JOIN_I_ATTEMPT];
    mb->master_port = (int)mp;
    mb->node_rank = -1;
    c->member = mb;
    r->m[r->n++] = mb;
    int64_t now = now_ms(s);
    if (r->n == 1) {
        r->first_join = now;
        /* The smaller of the daemon's and the first joiner's: an agent that
         * waits a little longer than its configured timeout still gets the
         * daemon's message (who joined, how many are missing) first. */
        r->join_timeout_ms = jt > 0 && jt < s->join_timeout_ms ? (int)jt : s->join_timeout_ms;
    }
    r->last_join = now;
    srv_log(s, "node %s (%s, pid %d, attempt %d, node rank %s) joined: %d of min %d, max %d", mb->name, c->peer,
            mb->pid, mb->attempt, hint >= 0 ? (snprintf(msg, sizeof msg, "%lld", (long long)hint), msg) : "any",
            r->n, s->min_nodes, s->max_nodes);
    if (s->active) {
        snprintf(msg, sizeof msg, "node %s is waiting to join the next round", mb->name);
        for (int i = 0; i < s->active->n; i++) {
            member *am = s->active->m[i];
            if (am->c && !am->left) send_event(am->c, RDZV_EV_NODE_WAITING, s->active->number, -1, msg);
        }
    }
    round_try_close(s);
}

static void dispatch(rdzv_server *s, conn *c, const frame_msg *m)
{
    char msg[300];
    switch (m->type) {
    case FRAME_HELLO:
        if (c->authed) { conn_refuse(c, "HELLO sent twice"); return; }
        if (!token_ok(s, &m->s[HELLO_S_TOKEN])) { conn_refuse(c, "wrong job token"); return; }
        c->authed = 1;
        frame_decoder_set_max(c->dec, FRAME_MAX_PAYLOAD);
        reply(c, KV_OK, 0, NULL, 0, NULL);
        return;
    case FRAME_JOIN:
        if (!token_ok(s, &m->s[JOIN_S_TOKEN])) { conn_refuse(c, "wrong job token"); return; }
        c->authed = 1;
        frame_decoder_set_max(c->dec, FRAME_MAX_PAYLOAD);
        handle_join(s, c, m);
        return;
    default:
        break;
    }
    if (!c->authed) {
        snprintf(msg, sizeof msg, "expected HELLO or JOIN first, got %s", frame_type_name(m->type));
        conn_refuse(c, msg);
        return;
    }
    switch (m->type) {
    case FRAME_HEARTBEAT: {
        int64_t ints[1] = { -1 };
        if (c->member && s->active && c->member->node_rank >= 0) {
            c->member->last_hb = now_ms(s);
            ints[0] = s->active->number;
        }
        conn_send(c, FRAME_HEARTBEAT, ints, NULL, NULL, 0);
        return;
    }
    case FRAME_LEAVE:
        if (c->member && s->active && c->member->node_rank >= 0) {
            c->member->left = 1;
            srv_log(s, "node %s (rank %d) left round %d cleanly", c->member->name, c->member->node_rank, s->active->number);
            round_check_done(s);
        }
        return;
    case FRAME_FAIL:
        if (c->member && s->active && c->member->node_rank >= 0) {
            char fm[FRAME_MAX_TEXT + 600];
            snprintf(fm, sizeof fm, "round %d failed: node %s (rank %d) reported: %s", s->active->number,
                     c->member->name, c->member->node_rank, m->s[FAIL_S_REASON].p);
            round_fail(s, c->member, RDZV_EV_ROUND_FAILED, fm);
        }
        return;
    case FRAME_KV_SET: case FRAME_KV_GET: case FRAME_KV_WAIT: case FRAME_KV_ADD:
    case FRAME_KV_CAS: case FRAME_KV_DELETE: case FRAME_KV_BARRIER:
        if (c->wait) { conn_refuse(c, "a request arrived while another is pending"); return; }
        handle_kv(s, c, m);
        return;
    default:
        snprintf(msg, sizeof msg, "unexpected %s frame from a client", frame_type_name(m->type));
        conn_refuse(c, msg);
        return;
    }
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    rdzv_server *s = ((conn *)h)->srv;
    (void)suggested;
    *buf = uv_buf_init(s->readbuf, sizeof s->readbuf);
}

static void on_read(uv_stream_t *st, ssize_t nread, const uv_buf_t *buf)
{
    conn *c = (conn *)st;
    rdzv_server *s = c->srv;
    if (c->closing) return;
    if (nread < 0) { /* EOF or error: a member's loss is reported by detach */
        conn_drop(c, NULL);
        return;
    }
    if (nread == 0) return;
    if (frame_decoder_feed(c->dec, buf->base, (size_t)nread) != 0) { conn_drop(c, "out of memory"); return; }
    while (!c->closing) {
        frame_msg m;
        char err[300];
        int rc = frame_decoder_next(c->dec, &m, err, sizeof err);
        if (rc == FRAME_DEC_NEED_MORE) break;
        if (rc == FRAME_DEC_ERROR) { conn_refuse(c, err); break; }
        dispatch(s, c, &m);
        frame_msg_free(&m);
    }
}

static void peer_name(conn *c)
{
    struct sockaddr_storage ss;
    int len = sizeof ss;
    snprintf(c->peer, sizeof c->peer, "?");
    snprintf(c->peer_ip, sizeof c->peer_ip, "?");
    if (uv_tcp_getpeername(&c->tcp, (struct sockaddr *)&ss, &len) != 0) return;
    int port = 0;
    if (ss.ss_family == AF_INET) {
        uv_ip4_name((struct sockaddr_in *)&ss, c->peer_ip, sizeof c->peer_ip);
        port = ntohs(((struct sockaddr_in *)&ss)->sin_port);
        snprintf(c->peer, sizeof c->peer, "%s:%d", c->peer_ip, port);
    } else if (ss.ss_family == AF_INET6) {
        uv_ip6_name((struct sockaddr_in6 *)&ss, c->peer_ip, sizeof c->peer_ip);
        port = ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
        /* An IPv4 client of a dual-stack socket: report the plain IPv4 address. */
        if (!strncmp(c->peer_ip, "::ffff:", 7) && strchr(c->peer_ip, '.'))
            memmove(c->peer_ip, c->peer_ip + 7, strlen(c->peer_ip + 7) + 1);
        snprintf(c->peer, sizeof c->peer, strchr(c->peer_ip, ':') ? "[%s]:%d" : "%s:%d", c->peer_ip, port);
    }
}

static void on_connection(uv_stream_t *ls, int status)
{
    rdzv_server *s = ls->data;
    if (status < 0) { srv_log(s, "accept failed: %s", uv_strerror(status)); return; }
    conn *c = calloc(1, sizeof *c);
    if (!c) return;
    c->srv = s;
    uv_tcp_init(&s->loop, &c->tcp);
    if (uv_accept(ls, (uv_stream_t *)&c->tcp) != 0 || !(c->dec = frame_decoder_new())) {
        uv_close((uv_handle_t *)&c->tcp, on_close);
        return;
    }
    frame_decoder_set_max(c->dec, RDZV_STRANGER_MAX);
    peer_name(c);
    if (s->nconns >= RDZV_MAX_CONNS) {
        srv_log(s, "refused client %s: %d connections already", c->peer, s->nconns);
        uv_close((uv_handle_t *)&c->tcp, on_close);
        return;
    }
    uv_tcp_nodelay(&c->tcp, 1);
    c->connected_at = now_ms(s);
    c->next = s->conns;
    if (s->conns) s->conns->prev = c;
    s->conns = c;
    s->nconns++;
    uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read);
}

/* ------------------------------------------------------------------ tick */

static void on_tick(uv_timer_t *t)
{
    rdzv_server *s = t->data;
    int64_t now = now_ms(s);
    /* KV waits past their deadline. */
    for (waiter *w = s->waiters, *next; w; w = next) {
        next = w->next;
        if (now >= w->deadline) waiter_timeout(s, w);
    }
    /* Silent members of the running round. */
    if (s->active) {
        round *r = s->active;
        for (int i = 0; i < r->n; i++) {
            member *m = r->m[i];
            if (m->left || !m->c || now - m->last_hb <= s->hb_timeout_ms) continue;
            char msg[600];
            snprintf(msg, sizeof msg, "node %s (rank %d) dead: no heartbeat for %.1f s", m->name, m->node_rank,
                     (double)(now - m->last_hb) / 1000.0);
            conn *dead = m->c;
            round_fail(s, m, RDZV_EV_NODE_DEAD, msg);
            conn_drop(dead, "no heartbeat");
            break; /* the round is gone */
        }
    }
    round_try_close(s);
    /* Connections that never said who they are. */
    for (conn *c = s->conns, *next; c; c = next) {
        next = c->next;
        if (!c->authed && now - c->connected_at > RDZV_HELLO_MS) conn_drop(c, "no HELLO or JOIN within 10 s");
    }
}

/* ------------------------------------------------------------------ lifecycle */

static void on_stop(uv_async_t *a)
{
    rdzv_server *s = a->data;
    round_free(s->joining);
    round_free(s->active);
    s->joining = s->active = NULL;
    while (s->waiters) {
        waiter *w = s->waiters;
        w->b = NULL;
        waiter_free(s, w);
    }
    while (s->barriers) barrier_release(s, s->barriers);
    while (s->conns) conn_drop(s->conns, NULL);
    uv_close((uv_handle_t *)&s->listener, NULL);
    uv_close((uv_handle_t *)&s->tick, NULL);
    uv_close((uv_handle_t *)&s->stop, NULL);
}

static void server_thread(void *arg)
{
    rdzv_server *s = arg;
    uv_run(&s->loop, UV_RUN_DEFAULT);
}

static void server_free(rdzv_server *s)
{
    kv_store_free(s->kv);
    free(s->host);
    free(s->token);
    free(s->run_id);
    free(s);
}

rdzv_server *rdzv_server_start(const rdzv_server_opts *o, char *err, size_t errlen)
{
    const char *host = o->host && *o->host ? o->host : "0.0.0.0";
    char ep[300];
    snprintf(ep, sizeof ep, strchr(host, ':') ? "[%s]:%d" : "%s:%d", host, o->port);
    if (o->min_nodes < 1 || o->max_nodes < o->min_nodes || o->max_nodes > RDZV_MAX_NODES) {
        snprintf(err, errlen, "rendezvous: bad node counts %d:%d (need 1 <= min <= max <= %d)", o->min_nodes,
                 o->max_nodes, RDZV_MAX_NODES);
        return NULL;
    }
    if (o->port < 0 || o->port > 65535) {
        snprintf(err, errlen, "cannot listen on %s: port must be 0-65535", ep);
        return NULL;
    }
    rdzv_server *s = calloc(1, sizeof *s);
    if (!s) { snprintf(err, errlen, "out of memory"); return NULL; }
    s->host = strdup(host);
    s->token = strdup(o->token ? o->token : "");
    s->run_id = strdup(o->run_id && *o->run_id ? o->run_id : o->token && *o->token ? o->token : "none");
    s->kv = kv_store_new();
    s->min_nodes = o->min_nodes;
    s->max_nodes = o->max_nodes;
    s->join_timeout_ms = o->join_timeout_ms > 0 ? o->join_timeout_ms : RDZV_DEFAULT_JOIN_TIMEOUT_MS;
    s->last_call_ms = o->last_call_ms ? o->last_call_ms : RDZV_DEFAULT_LAST_CALL_MS;
    s->hb_interval_ms = o->hb_interval_ms > 0 ? o->hb_interval_ms : RDZV_DEFAULT_HB_INTERVAL_MS;
    s->hb_timeout_ms = o->hb_timeout_ms > 0 ? o->hb_timeout_ms : RDZV_DEFAULT_HB_TIMEOUT_MS;
    s->log = o->log;
    if (!s->host || !s->token || !s->run_id || !s->kv) {
        snprintf(err, errlen, "out of memory");
        server_free(s);
        return NULL;
    }
    struct addrinfo hints = { 0 }, *res = NULL;
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE;
    char portstr[16];
    snprintf(portstr, sizeof portstr, "%d", o->port);
    int gai = getaddrinfo(host, portstr, &hints, &res);
    if (gai != 0) {
        snprintf(err, errlen, "cannot listen on %s: %s", ep, gai_strerror(gai));
        server_free(s);
        return NULL;
    }
    int rc = uv_loop_init(&s->loop);
    if (rc == 0) {
        uv_tcp_init(&s->loop, &s->listener);
        s->listener.data = s;
        rc = uv_tcp_bind(&s->listener, res->ai_addr, 0);
        if (rc == 0) rc = uv_listen((uv_stream_t *)&s->listener, 1024, on_connection);
        if (rc != 0) uv_close((uv_handle_t *)&s->listener, NULL);
    }
    freeaddrinfo(res);
    if (rc != 0) {
        snprintf(err, errlen, "cannot listen on %s: %s", ep, uv_strerror(rc));
        uv_run(&s->loop, UV_RUN_DEFAULT); /* runs the close callback */
        uv_loop_close(&s->loop);
        server_free(s);
        return NULL;
    }
    struct sockaddr_storage ss;
    int len = sizeof ss;
    uv_tcp_getsockname(&s->listener, (struct sockaddr *)&ss, &len);
    s->port = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                             : ((struct sockaddr_in *)&ss)->sin_port);
    uv_timer_init(&s->loop, &s->tick);
    s->tick.data = s;
    uv_timer_start(&s->tick, on_tick, RDZV_TICK_MS, RDZV_TICK_MS);
    uv_async_init(&s->loop, &s->stop, on_stop);
    s->stop.data = s;
    /* The loop thread takes no signals: they stay with the embedding agent. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &old);
    rc = uv_thread_create(&s->thread, server_thread, s);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0) {
        snprintf(err, errlen, "cannot start the rendezvous thread: %s", uv_strerror(rc));
        on_stop(&s->stop);
        uv_run(&s->loop, UV_RUN_DEFAULT);
        uv_loop_close(&s->loop);
        server_free(s);
        return NULL;
    }
    snprintf(ep, sizeof ep, strchr(host, ':') ? "[%s]:%d" : "%s:%d", host, s->port);
    srv_log(s, "listening on %s, nodes %d:%d", ep, s->min_nodes, s->max_nodes);
    return s;
}

int rdzv_server_port(const rdzv_server *s)
{
    return s->port;
}

void rdzv_server_stop(rdzv_server *s)
{
    if (!s) return;
    uv_async_send(&s->stop);
    uv_thread_join(&s->thread);
    uv_loop_close(&s->loop);
    server_free(s);
}
