/* rdzv_client.c — an agent's side of the rendezvous (see rdzv.h).
 *
 * rdzv_join is a plain blocking call. The session it returns owns a thread that
 * heartbeats and reads the daemon's pushes, because an agent spends its time
 * supervising workers and must learn of a dead peer without polling for it. The
 * thread hands events over through an eventfd that the agent's loop watches;
 * it blocks every signal so the agent's handlers keep running on the agent's
 * own thread. */
#include "lib/rdzv/rdzv.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include "lib/rdzv/frame.h"
#include "lib/rdzv/frame_sock.h"
#include "lib/rdzv/rdzv_probe.h"
#include "lib/util/errline.h"

#define RDZV_DEFAULT_PORT   29400
#define RDZV_JOIN_SLACK_MS  2000   /* lets the daemon's timeout message arrive first */
#define RDZV_PROBE_AFTER_MS 3000   /* silence this long after JOIN: is a daemon there at all? */
#define RDZV_PROBE_WAIT_MS  2000
#define RDZV_QUEUE          64
#define RDZV_LEAVE_DRAIN_MS 1000

struct rdzv_session {
    frame_sock *fs;
    pthread_t thread;
    int thread_started;
    pthread_mutex_t mu;       /* socket writes and the event queue */
    int event_fd;             /* readable while events are queued */
    int stop_fd;              /* wakes the thread to end */
    rdzv_event queue[RDZV_QUEUE];
    int qhead, qlen;
    int round, hb_interval_ms, hb_timeout_ms;
    char ep[300];
};

static void push_event(rdzv_session *s, int kind, int round, int node_rank, const char *msg)
{
    pthread_mutex_lock(&s->mu);
    if (s->qlen < RDZV_QUEUE) {
        rdzv_event *ev = &s->queue[(s->qhead + s->qlen) % RDZV_QUEUE];
        ev->kind = (rdzv_event_kind)kind;
        ev->round = round;
        ev->node_rank = node_rank;
        snprintf(ev->message, sizeof ev->message, "%s", msg);
        s->qlen++;
        uint64_t one = 1;
        if (write(s->event_fd, &one, sizeof one) < 0) {} /* the counter cannot overflow here */
    }
    pthread_mutex_unlock(&s->mu);
}

int rdzv_session_fd(const rdzv_session *s) { return s->event_fd; }

int rdzv_session_next_event(rdzv_session *s, rdzv_event *ev)
{
    pthread_mutex_lock(&s->mu);
    int got = s->qlen > 0;
    if (got) {
        *ev = s->queue[s->qhead];
        s->qhead = (s->qhead + 1) % RDZV_QUEUE;
        s->qlen--;
        if (s->qlen == 0) { /* reset the eventfd: not readable until the next event */
            uint64_t v;
            if (read(s->event_fd, &v, sizeof v) < 0) {}
        }
    }
    pthread_mutex_unlock(&s->mu);
    return got;
}

static int send_locked(rdzv_session *s, int type, const int64_t *ints, const frame_str *strs, char *why, size_t wl)
{
    frame_buf b = { 0 };
    if (frame_encode(&b, type, ints, strs, NULL, 0) != 0) {
        frame_buf_free(&b);
        snprintf(why, wl, "frame too large");
        return -1;
    }
    pthread_mutex_lock(&s->mu);
    int rc = frame_sock_send(s->fs, &b, clock_now_ms() + s->hb_timeout_ms, why, wl);
    pthread_mutex_unlock(&s->mu);
    frame_buf_free(&b);
    return rc;
}

static void *session_thread(void *arg)
{
    rdzv_session *s = arg;
    int64_t last_rx = clock_now_ms(), next_hb = clock_now_ms();
    char why[300], msg[1024];
    for (;;) {
        int64_t now = clock_now_ms();
        if (now >= next_hb) {
            int64_t ints[1] = { s->round };
            if (send_locked(s, FRAME_HEARTBEAT, ints, NULL, why, sizeof why) != 0) {
                snprintf(msg, sizeof msg, "lost the rendezvous daemon at %s: %s", s->ep, why);
                push_event(s, RDZV_EV_DAEMON_LOST, s->round, -1, msg);
                return NULL;
            }
            next_hb = now + s->hb_interval_ms;
        }
        if (now - last_rx > s->hb_timeout_ms) {
            snprintf(msg, sizeof msg, "lost the rendezvous daemon at %s: silent for %.1f s", s->ep,
                     (double)(now - last_rx) / 1000.0);
            push_event(s, RDZV_EV_DAEMON_LOST, s->round, -1, msg);
            return NULL;
        }
        struct pollfd p[2] = { { frame_sock_fd(s->fs), POLLIN, 0 }, { s->stop_fd, POLLIN, 0 } };
        int wait = (int)(next_hb - now);
        if (wait < 0) wait = 0;
        if (poll(p, 2, wait) < 0 && errno != EINTR) {
            snprintf(msg, sizeof msg, "rendezvous session: poll failed: %s", strerror(errno));
            push_event(s, RDZV_EV_DAEMON_LOST, s->round, -1, msg);
            return NULL;
        }
        if (p[1].revents) return NULL;
        if (!p[0].revents) continue;
        for (;;) {
            frame_msg m;
            int rc = frame_sock_poll(s->fs, &m, why, sizeof why);
            if (rc == 0) break;
            if (rc < 0) {
                snprintf(msg, sizeof msg, "lost the rendezvous daemon at %s: %s", s->ep, why);
                push_event(s, RDZV_EV_DAEMON_LOST, s->round, -1, msg);
                return NULL;
            }
            last_rx = clock_now_ms();
            if (m.type == FRAME_EVENT) {
                int kind = (int)m.i[EVENT_I_KIND];
                if (kind < RDZV_EV_NODE_DEAD || kind > RDZV_EV_DAEMON_LOST) kind = RDZV_EV_ROUND_FAILED;
                push_event(s, kind, (int)m.i[EVENT_I_ROUND], (int)m.i[EVENT_I_NODE_RANK], m.s[EVENT_S_MESSAGE].p);
            } else if (m.type == FRAME_ERROR) {
                snprintf(msg, sizeof msg, "rendezvous daemon at %s: %s", s->ep, m.s[ERROR_S_REASON].p);
                push_event(s, RDZV_EV_DAEMON_LOST, s->round, -1, msg);
                frame_msg_free(&m);
                return NULL;
            }
            frame_msg_free(&m); /* HEARTBEAT echoes only refresh last_rx */
        }
    }
}

static void session_free(rdzv_session *s)
{
    if (s->event_fd >= 0) close(s->event_fd);
    if (s->stop_fd >= 0) close(s->stop_fd);
    frame_sock_close(s->fs);
    pthread_mutex_destroy(&s->mu);
    free(s);
}

static int fill_result(const frame_msg *m, rdzv_result *res, char *why, size_t wl)
{
    memset(res, 0, sizeof *res);
    res->round = (int)m->i[JOIN_OK_I_ROUND];
    res->node_rank = (int)m->i[JOIN_OK_I_NODE_RANK];
    res->nnodes = (int)m->i[JOIN_OK_I_NNODES];
    res->rank_offset = (int)m->i[JOIN_OK_I_RANK_OFFSET];
    res->world_size = (int)m->i[JOIN_OK_I_WORLD_SIZE];
    res->master_port = (int)m->i[JOIN_OK_I_MASTER_PORT];
    res->hb_interval_ms = (int)m->i[JOIN_OK_I_HB_INTERVAL];
    res->hb_timeout_ms = (int)m->i[JOIN_OK_I_HB_TIMEOUT];
    /* Trust nothing the wire says, the daemon's answer included. */
    if (m->i[JOIN_OK_I_NNODES] < 1 || m->i[JOIN_OK_I_NNODES] > RDZV_MAX_NODES || res->node_rank < 0 ||
        m->i[JOIN_OK_I_NODE_RANK] >= m->i[JOIN_OK_I_NNODES] || m->i[JOIN_OK_I_WORLD_SIZE] < 1 ||
        m->i[JOIN_OK_I_WORLD_SIZE] > INT32_MAX || res->rank_offset < 0 ||
        m->i[JOIN_OK_I_RANK_OFFSET] >= m->i[JOIN_OK_I_WORLD_SIZE] || res->master_port < 1 ||
        m->i[JOIN_OK_I_MASTER_PORT] > 65535 || res->hb_interval_ms < 1 || res->hb_timeout_ms < res->hb_interval_ms ||
        m->i[JOIN_OK_I_HB_TIMEOUT] > 86400000 || m->i[JOIN_OK_I_ROUND] < 0 || m->i[JOIN_OK_I_ROUND] > INT32_MAX ||
        m->nlist != (uint32_t)res->nnodes || m->s[JOIN_OK_S_MASTER_ADDR].len >= RDZV_MAX_NAME ||
        m->s[JOIN_OK_S_RUN_ID].len >= RDZV_MAX_NAME || m->s[JOIN_OK_S_KV_PREFIX].len >= RDZV_MAX_NAME) {
        snprintf(why, wl, "the daemon's JOIN_OK is inconsistent");
        return -1;
    }
    strcpy(res->master_addr, m->s[JOIN_OK_S_MASTER_ADDR].p);
    strcpy(res->run_id, m->s[JOIN_OK_S_RUN_ID].p);
    strcpy(res->kv_prefix, m->s[JOIN_OK_S_KV_PREFIX].p);
    return 0;
}

rdzv_session *rdzv_join(const char *endpoint, const char *token, const rdzv_node_info *info, int timeout_ms,
                        rdzv_result *res, char *err, size_t errlen)
{
    char host[RDZV_MAX_NAME], why[800], hn[RDZV_MAX_NAME] = "";
    int port;
    if (rdzv_endpoint_parse(endpoint, RDZV_DEFAULT_PORT, host, sizeof host, &port, why, sizeof why) != 0) {
        errline(err, errlen, "rendezvous: %s", why);
        return NULL;
    }
    if (!info || info->local_world_size < 1 || info->node_rank < -1 || timeout_ms < 0) {
        errline(err, errlen, "rendezvous: bad join arguments (local world size >= 1, node rank >= -1, timeout >= 0)");
        return NULL;
    }
    const char *name = info->name;
    if (!name || !*name) {
        gethostname(hn, sizeof hn - 1);
        name = hn;
    }
    rdzv_session *s = calloc(1, sizeof *s);
    if (!s) { errline(err, errlen, "rendezvous: out of memory"); return NULL; }
    s->event_fd = s->stop_fd = -1;
    pthread_mutex_init(&s->mu, NULL);
    frame_format_endpoint(s->ep, sizeof s->ep, host, port);

    int64_t deadline = clock_now_ms() + timeout_ms;
    int fd = frame_connect(host, port, deadline, why, sizeof why);
    if (fd < 0) {
        errline(err, errlen, "rendezvous: %s", why);
        session_free(s);
        return NULL;
    }
    if (!(s->fs = frame_sock_new(fd))) {
        errline(err, errlen, "rendezvous: out of memory");
        session_free(s);
        return NULL;
    }
    int64_t ints[6] = { info->node_rank, info->local_world_size, getpid(), info->attempt, info->master_port,
                        timeout_ms };
    frame_str strs[3] = { FRAME_STR(token ? token : ""), FRAME_STR(name), FRAME_STR(info->addr ? info->addr : "") };
    frame_buf b = { 0 };
    if (frame_encode(&b, FRAME_JOIN, ints, strs, NULL, 0) != 0 ||
        frame_sock_send(s->fs, &b, deadline + RDZV_JOIN_SLACK_MS, why, sizeof why) != 0) {
        errline(err, errlen, "rendezvous at %s: cannot send JOIN: %s", s->ep, b.len ? why : "name, address or token too long");
        frame_buf_free(&b);
        session_free(s);
        return NULL;
    }
    frame_buf_free(&b);

    frame_msg m;
    char silent[512] = ""; /* what the probe found when the endpoint stayed silent */
    int64_t until = deadline + RDZV_JOIN_SLACK_MS, probe_at = clock_now_ms() + RDZV_PROBE_AFTER_MS;
    int rc = frame_sock_recv(s->fs, &m, probe_at < until ? probe_at : until, why, sizeof why);
    if (rc == 0 && probe_at < until) {
        /* Silence: a daemon waiting for other nodes, or no daemon at all. */
        char who[512];
        int p = rdzv_probe(host, port, token, RDZV_PROBE_WAIT_MS, who, sizeof who);
        if (p == 0) {
            errline(err, errlen, "rendezvous at %s: %s; the agents cannot meet there: give --rdzv-endpoint a port "
                    "that nothing else uses, or stop what holds port %d (ss -ltnp 'sport = :%d' names it)",
                    s->ep, who, port, port);
            session_free(s);
            return NULL;
        }
        if (p < 0) snprintf(silent, sizeof silent, "%s", who);
        if (p < 0 && info->log)
            fprintf(info->log, "dtrun: no answer from the rendezvous at %s after %d s: %s; still waiting (up to "
                    "%.0f s); if no dtrun agent should host it, give --rdzv-endpoint a free port or stop what "
                    "holds port %d\n", s->ep, RDZV_PROBE_AFTER_MS / 1000, who, timeout_ms / 1000.0, port);
        rc = frame_sock_recv(s->fs, &m, until, why, sizeof why);
    }
    if (rc < 0 && strstr(why, "bad frame")) {
        /* Bytes that are no frame: name what answered, in its own words. */
        char who[512];
        if (rdzv_probe(host, port, token, RDZV_PROBE_WAIT_MS, who, sizeof who) == 0) {
            errline(err, errlen, "rendezvous at %s: %s; the agents cannot meet there: give --rdzv-endpoint a port "
                    "that nothing else uses, or stop what holds port %d (ss -ltnp 'sport = :%d' names it)",
                    s->ep, who, port, port);
            session_free(s);
            return NULL;
        }
    }
    if (rc <= 0) {
        if (rc == 0 && silent[0])
            /* The cause named at 3 s still holds: the last line says it again. */
            errline(err, errlen, "rendezvous at %s: no answer within %.1f s: %s; if no dtrun agent should host it, "
                    "give --rdzv-endpoint a free port or stop what holds port %d", s->ep, timeout_ms / 1000.0,
                    silent, port);
        else if (rc == 0)
            errline(err, errlen, "rendezvous at %s: the round did not close within %.1f s", s->ep, timeout_ms / 1000.0);
        else
            errline(err, errlen, "rendezvous at %s: %s", s->ep, why);
        session_free(s);
        return NULL;
    }
    if (m.type != FRAME_JOIN_OK || fill_result(&m, res, why, sizeof why) != 0) {
        if (m.type == FRAME_ERROR) {
            /* "rendezvous timed out …" reads better without a second "rendezvous". */
            const char *reason = m.s[ERROR_S_REASON].p;
            if (!strncmp(reason, "rendezvous ", 11)) reason += 11;
            errline(err, errlen, "rendezvous at %s: %s", s->ep, reason);
        }
        else if (m.type != FRAME_JOIN_OK)
            errline(err, errlen, "rendezvous at %s: unexpected %s frame", s->ep, frame_type_name(m.type));
        else
            errline(err, errlen, "rendezvous at %s: %s", s->ep, why);
        frame_msg_free(&m);
        session_free(s);
        return NULL;
    }
    frame_msg_free(&m);
    s->round = res->round;
    s->hb_interval_ms = res->hb_interval_ms;
    s->hb_timeout_ms = res->hb_timeout_ms;
    s->event_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    s->stop_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &old);
    int trc = s->event_fd < 0 || s->stop_fd < 0 ? -1 : pthread_create(&s->thread, NULL, session_thread, s);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (trc != 0) {
        errline(err, errlen, "rendezvous: cannot start the heartbeat thread");
        session_free(s);
        return NULL;
    }
    s->thread_started = 1;
    return s;
}

int rdzv_session_report_failure(rdzv_session *s, const char *reason)
{
    char why[300];
    int64_t ints[1] = { s->round };
    frame_str strs[1] = { { reason ? reason : "", (uint32_t)strnlen(reason ? reason : "", FRAME_MAX_TEXT) } };
    return send_locked(s, FRAME_FAIL, ints, strs, why, sizeof why);
}

void rdzv_session_close(rdzv_session *s, int clean)
{
    if (!s) return;
    if (s->thread_started) {
        uint64_t one = 1;
        if (write(s->stop_fd, &one, sizeof one) < 0) {}
        pthread_join(s->thread, NULL);
    }
    if (clean) {
        /* LEAVE, then half-close and wait for the daemon's EOF: closing with
         * unread data would send a reset that could overtake the LEAVE. */
        char why[300];
        int64_t ints[1] = { s->round };
        if (send_locked(s, FRAME_LEAVE, ints, NULL, why, sizeof why) == 0) {
            shutdown(frame_sock_fd(s->fs), SHUT_WR);
            int64_t deadline = clock_now_ms() + RDZV_LEAVE_DRAIN_MS;
            for (;;) {
                frame_msg m;
                int rc = frame_sock_recv(s->fs, &m, deadline, why, sizeof why);
                if (rc <= 0) break;
                frame_msg_free(&m);
            }
        }
    }
    session_free(s);
}
