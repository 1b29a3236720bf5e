/* rdzv_server.c — the rendezvous daemon and KV store on one libuv loop thread:
 * start, stop, the thread, and the periodic tick. Connections, rounds and KV
 * requests have their files (lib/rdzv/rdzv_server_internal.h lists them).
 *
 * Everything runs on the loop thread except rdzv_server_start (which binds
 * before the thread exists, so errors and the port are known synchronously) and
 * rdzv_server_stop (which only signals the loop through a uv_async_t and joins).
 *
 * Time-based work (join / last-call deadlines, heartbeat timeouts, KV waits,
 * clients that never say hello) is done by one periodic tick rather than a
 * timer per object: a precision of RDZV_TICK_MS is plenty for timeouts counted
 * in seconds, and it keeps handle lifetimes trivial. libuv's loop time only
 * schedules that tick; every deadline is a clock_now_ms() value. */
#include "lib/rdzv/rdzv.h"

#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "lib/rdzv/rdzv_server_internal.h"
#include "lib/util/clock.h"

#define RDZV_TICK_MS        50

void srv_log(rdzv_server *s, const char *fmt, ...)
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

/* ------------------------------------------------------------------ tick */

static void on_tick(uv_timer_t *t)
{
    rdzv_server *s = t->data;
    int64_t now = clock_now_ms();
    srv_kv_tick(s, now);
    srv_round_tick(s, now);
    srv_conn_tick(s, now);
}

/* ------------------------------------------------------------------ lifecycle */

static void on_stop(uv_async_t *a)
{
    rdzv_server *s = a->data;
    srv_round_free(s->joining);
    srv_round_free(s->active);
    s->joining = s->active = NULL;
    srv_kv_free_all(s);
    while (s->conns) srv_conn_drop(s->conns, NULL);
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
        if (rc == 0) rc = uv_listen((uv_stream_t *)&s->listener, 1024, srv_conn_accept);
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
