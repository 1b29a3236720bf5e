/* rdzv_server_conn.c — the daemon's connections: accepting a client, reading
 * and writing its frames, checking the job token, dispatching each request to
 * the rounds or the KV store, and letting a bad client go.
 *
 * A connection is released through srv_conn_drop (immediately) or
 * srv_conn_refuse (an ERROR frame first, then shutdown); both detach it from
 * its round and from any pending KV wait at once, so the rest of the server
 * never sees a half-closed connection. The memory goes in the uv_close
 * callback. */
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "lib/rdzv/kv.h"
#include "lib/rdzv/rdzv_server_internal.h"
#include "lib/util/clock.h"

#define RDZV_HELLO_MS       10000             /* a client must say who it is this soon */
#define RDZV_MAX_CONNS      8192
#define RDZV_MAX_BACKLOG    (16u << 20)       /* unsent reply bytes before a client is dropped */
#define RDZV_STRANGER_MAX   16384             /* payload limit until the token is shown */

typedef struct {
    uv_write_t req;
    conn *c;
    size_t len;
    uint8_t *data;
} write_req;

/* ------------------------------------------------------------------ sending */

static void on_write(uv_write_t *req, int status)
{
    write_req *w = (write_req *)req;
    w->c->backlog -= w->len;
    free(w->data);
    free(w);
    (void)status; /* a failed write shows up as a read error / EOF */
}

void srv_conn_send(conn *c, int type, const int64_t *ints, const frame_str *strs, const frame_str *list,
                   uint32_t nlist)
{
    if (c->closing) return;
    frame_buf b = { 0 };
    if (frame_encode(&b, type, ints, strs, list, nlist) != 0) {
        frame_buf_free(&b);
        srv_conn_drop(c, "reply does not fit a frame");
        return;
    }
    write_req *w = malloc(sizeof *w);
    if (!w) { frame_buf_free(&b); srv_conn_drop(c, "out of memory"); return; }
    w->c = c;
    w->len = b.len;
    w->data = b.data;
    uv_buf_t ub = uv_buf_init((char *)b.data, (unsigned)b.len);
    if (uv_write(&w->req, (uv_stream_t *)&c->tcp, &ub, 1, on_write) != 0) {
        free(w->data);
        free(w);
        srv_conn_drop(c, "write failed");
        return;
    }
    c->backlog += b.len;
    if (c->backlog > RDZV_MAX_BACKLOG) srv_conn_drop(c, "does not read its replies");
}

void srv_conn_reply(conn *c, int status, int64_t ival, const void *val, size_t len, const char *msg)
{
    int64_t ints[2] = { status, ival };
    frame_str strs[2] = { { val ? (const char *)val : "", (uint32_t)len }, FRAME_STR(msg ? msg : "") };
    srv_conn_send(c, FRAME_REPLY, ints, strs, NULL, 0);
}

void srv_conn_event(conn *c, int kind, int round_no, int node_rank, const char *msg)
{
    int64_t ints[3] = { kind, round_no, node_rank };
    frame_str strs[1] = { FRAME_STR(msg) };
    srv_conn_send(c, FRAME_EVENT, ints, strs, NULL, 0);
}

/* ------------------------------------------------------------------ closing */

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
    if (c->wait) srv_kv_conn_gone(s, c);
    if (c->member) srv_round_member_lost(s, c->member, why);
    if (c->prev) c->prev->next = c->next; else s->conns = c->next;
    if (c->next) c->next->prev = c->prev;
    c->prev = c->next = NULL;
    s->nconns--;
}

void srv_conn_drop(conn *c, const char *why)
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
void srv_conn_refuse(conn *c, const char *reason)
{
    if (c->closing) return;
    srv_log(c->srv, "refused client %s: %s", c->peer, reason);
    frame_str strs[1] = { FRAME_STR(reason) };
    srv_conn_send(c, FRAME_ERROR, NULL, strs, NULL, 0);
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

/* ------------------------------------------------------------------ receiving */

static int token_ok(rdzv_server *s, const frame_str *t)
{
    /* Compare every byte whatever the first mismatch, so timing says nothing. */
    size_t n = strlen(s->token);
    unsigned diff = (unsigned)(n != t->len);
    for (size_t i = 0; i < n; i++) diff |= (unsigned char)s->token[i] ^ (unsigned char)(i < t->len ? t->p[i] : 0);
    return diff == 0;
}

static void dispatch(rdzv_server *s, conn *c, const frame_msg *m)
{
    char msg[300];
    switch (m->type) {
    case FRAME_HELLO:
        if (c->authed) { srv_conn_refuse(c, "HELLO sent twice"); return; }
        if (!token_ok(s, &m->s[HELLO_S_TOKEN])) { srv_conn_refuse(c, "wrong job token"); return; }
        c->authed = 1;
        frame_decoder_set_max(c->dec, FRAME_MAX_PAYLOAD);
        srv_conn_reply(c, KV_OK, 0, NULL, 0, NULL);
        return;
    case FRAME_JOIN:
        if (!token_ok(s, &m->s[JOIN_S_TOKEN])) { srv_conn_refuse(c, "wrong job token"); return; }
        c->authed = 1;
        frame_decoder_set_max(c->dec, FRAME_MAX_PAYLOAD);
        srv_round_join(s, c, m);
        return;
    default:
        break;
    }
    if (!c->authed) {
        snprintf(msg, sizeof msg, "expected HELLO or JOIN first, got %s", frame_type_name(m->type));
        srv_conn_refuse(c, msg);
        return;
    }
    switch (m->type) {
    case FRAME_HEARTBEAT:
        srv_round_heartbeat(s, c);
        return;
    case FRAME_LEAVE:
        srv_round_leave(s, c);
        return;
    case FRAME_FAIL:
        srv_round_report_failure(s, c, m->s[FAIL_S_REASON].p);
        return;
    case FRAME_KV_SET: case FRAME_KV_GET: case FRAME_KV_WAIT: case FRAME_KV_ADD:
    case FRAME_KV_CAS: case FRAME_KV_DELETE: case FRAME_KV_BARRIER:
        if (c->wait) { srv_conn_refuse(c, "a request arrived while another is pending"); return; }
        srv_kv_handle(s, c, m);
        return;
    default:
        snprintf(msg, sizeof msg, "unexpected %s frame from a client", frame_type_name(m->type));
        srv_conn_refuse(c, msg);
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
        srv_conn_drop(c, NULL);
        return;
    }
    if (nread == 0) return;
    if (frame_decoder_feed(c->dec, buf->base, (size_t)nread) != 0) { srv_conn_drop(c, "out of memory"); return; }
    while (!c->closing) {
        frame_msg m;
        char err[300];
        int rc = frame_decoder_next(c->dec, &m, err, sizeof err);
        if (rc == FRAME_DEC_NEED_MORE) break;
        if (rc == FRAME_DEC_ERROR) { srv_conn_refuse(c, err); break; }
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

void srv_conn_accept(uv_stream_t *ls, int status)
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
    c->connected_at = clock_now_ms();
    c->next = s->conns;
    if (s->conns) s->conns->prev = c;
    s->conns = c;
    s->nconns++;
    uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read);
}

/* Connections that never said who they are. */
void srv_conn_tick(rdzv_server *s, int64_t now)
{
    for (conn *c = s->conns, *next; c; c = next) {
        next = c->next;
        if (!c->authed && now - c->connected_at > RDZV_HELLO_MS) srv_conn_drop(c, "no HELLO or JOIN within 10 s");
    }
}
