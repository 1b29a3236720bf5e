/* rdzv_server_internal.h — the rendezvous daemon's state, shared by its files
 * (private to lib/rdzv/rdzv_server*.c):
 *   rdzv_server.c        start, stop, the loop thread and its periodic tick;
 *   rdzv_server_conn.c   connections: accept, frames in and out, the token,
 *                        dropping or refusing a client, dispatching requests;
 *   rdzv_server_round.c  rounds: JOIN, MIN:MAX closing, heartbeats, leaving,
 *                        failures and timeouts (rank rules: rdzv_round.c);
 *   rdzv_server_kv.c     the KV requests: set/get/wait/add/cas/delete/barrier
 *                        and their waits (the table itself: kv_store.c).
 *
 * Everything here runs on the loop thread. Times are clock_now_ms() values
 * (lib/util/clock.h), the one monotonic clock of dtrun. */
#ifndef DTRUN_RDZV_SERVER_INTERNAL_H
#define DTRUN_RDZV_SERVER_INTERNAL_H

#include <stdint.h>
#include <stdio.h>
#include <uv.h>

#include "lib/rdzv/frame.h"
#include "lib/rdzv/kv_store.h"
#include "lib/rdzv/rdzv.h"

#define RDZV_MAX_WAIT_MS    (7LL * 24 * 3600 * 1000)  /* longest join timeout or KV wait a client may ask */
#define RDZV_MAX_LOCAL      (1 << 20)                 /* local world sizes and barrier counts */

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

/* rdzv_server.c: one "dtrun rdzv: …" line on the log, when there is one. */
void srv_log(rdzv_server *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* rdzv_server_conn.c */
void srv_conn_accept(uv_stream_t *listener, int status); /* the listener's callback */
void srv_conn_send(conn *c, int type, const int64_t *ints, const frame_str *strs, const frame_str *list,
                   uint32_t nlist);
void srv_conn_reply(conn *c, int status, int64_t ival, const void *val, size_t len, const char *msg);
void srv_conn_event(conn *c, int kind, int round_no, int node_rank, const char *msg);
void srv_conn_drop(conn *c, const char *why);        /* now; why NULL: quietly (EOF, stop) */
void srv_conn_refuse(conn *c, const char *reason);   /* ERROR(reason) first, then close */
void srv_conn_tick(rdzv_server *s, int64_t now);     /* drops clients that never said HELLO/JOIN */

/* rdzv_server_round.c */
void srv_round_join(rdzv_server *s, conn *c, const frame_msg *m);
void srv_round_heartbeat(rdzv_server *s, conn *c);
void srv_round_leave(rdzv_server *s, conn *c);
void srv_round_report_failure(rdzv_server *s, conn *c, const char *reason);
void srv_round_member_lost(rdzv_server *s, member *m, const char *why);
void srv_round_tick(rdzv_server *s, int64_t now);    /* heartbeat timeouts, closing the joining round */
void srv_round_free(round *r);

/* rdzv_server_kv.c */
void srv_kv_handle(rdzv_server *s, conn *c, const frame_msg *m);
void srv_kv_conn_gone(rdzv_server *s, conn *c);       /* forgets c's pending wait */
void srv_kv_tick(rdzv_server *s, int64_t now);       /* answers the waits past their deadline */
void srv_kv_free_all(rdzv_server *s);                /* every wait and barrier, at stop */

#endif
