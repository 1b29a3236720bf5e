/* comm_cpu_tcp.c — the TCP backend: members on more than one node (or
 * DTRUN_COMM_TRANSPORT=tcp).
 *
 * Bootstrap: every rank listens on an ephemeral port of its own address and
 * publishes "HOST PORT" in the store; rank r connects to its ring successor
 * (collectives) and twice to every lower rank (send / recv, and the mesh of
 * the bf16 reduce_scatter), and accepts the rest.
 * A hello frame (magic, kind, rank, hash of the communicator id) tells the
 * acceptor who called and rejects strays.
 *
 * Collectives use the ring (two sockets per rank, one per direction), but for
 * the bf16 reduce_scatter (below):
 *   reduce_scatter: p-1 steps; at step s rank r sends its partial of chunk
 *     r-s-1 to r+1 and receives chunk r-s-2 from r-1, adds its own input, and
 *     after the last step holds its own chunk (r) reduced;
 *   all_gather: p-1 steps passing chunks along the ring;
 *   all_reduce = reduce_scatter + all_gather (2(p-1)/p of the data per rank:
 *     bandwidth-optimal);
 *   bf16 reduce_scatter (and so all_reduce): direct instead, over a third set
 *     of links (a full mesh, kind MESH): rank r sends chunk q of its bf16
 *     input straight to rank q and receives chunk r of every peer's, all at
 *     once, then sums the p contributions in rank order in fp32 and rounds
 *     once; the all_gather then rings the bf16 result. The same (p-1)/p of
 *     the data per rank and phase as the ring, in bf16: half the bytes of
 *     fp32; and the sum is the shm transport's, bit for bit (a ring would
 *     have to pass fp32 partial sums, or round at every hop);
 *   broadcast: a pipelined chain from the root; barrier: all_gather of a byte.
 * Each step sends and receives at once with non-blocking sockets and poll(),
 * bounded by the call's deadline. A peer that dies shows up as EOF / reset at
 * once; a rank that fails shuts all its sockets down, so the failure ripples
 * around the ring instead of leaving far ranks to their timeouts. */
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>
#include <xxhash.h>

#include "runtime/env.h"
#include "runtime/comm/comm_internal.h"

#define HELLO_MAGIC 0x64747263u  /* "dtrc" */
enum { KIND_RING = 1, KIND_P2P = 2, KIND_MESH = 3 };

typedef struct {
    uint32_t magic, kind, rank, pad;
    uint64_t id_hash;
} hello_msg;

typedef struct {
    int n, me;
    int next_fd, prev_fd;        /* ring: send to me+1, receive from me-1 */
    int *peer_fd;                /* send / recv, one per peer (-1 for me) */
    int *mesh_fd;                /* bf16 reduce_scatter, one per peer (-1 for me) */
    uint16_t *in16;              /* its received chunks: n slots of in16_cap */
    size_t in16_cap;             /* elements per slot */
    const uint16_t **srcs16;     /* n */
    int kick_fd;                 /* eventfd waking a p2p sleeper */
    float *tmp[2];               /* reduce_scatter partials */
    size_t tmp_cap;              /* floats each */
    char *bytes;                 /* barrier scratch, n */
} tcp_state;

static int mod(int a, int n)
{
    return ((a % n) + n) % n;
}

static void tcp_shutdown_all(tcp_state *t)
{
    if (t->next_fd >= 0)
        shutdown(t->next_fd, SHUT_RDWR);
    if (t->prev_fd >= 0)
        shutdown(t->prev_fd, SHUT_RDWR);
    for (int i = 0; t->peer_fd && i < t->n; i++)
        if (t->peer_fd[i] >= 0)
            shutdown(t->peer_fd[i], SHUT_RDWR);
    for (int i = 0; t->mesh_fd && i < t->n; i++)
        if (t->mesh_fd[i] >= 0)
            shutdown(t->mesh_fd[i], SHUT_RDWR);
}

/* Records the error, then shuts every socket so the peers learn at once. */
static int tcp_fail(comm *c, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int tcp_fail(comm *c, int code, const char *fmt, ...)
{
    char line[600];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    int rc = comm_fail(c, code, "%s", line);
    if (c->be_state)
        tcp_shutdown_all(c->be_state);
    return rc;
}

static int ms_left(double deadline)
{
    double left = deadline - clock_now_s();
    if (left <= 0)
        return 0;
    return left > 1e6 ? 1000000000 : (int)(left * 1000.0) + 1;
}

static int conn_lost(comm *c, const char *label, int peer, int err_no, const char *what)
{
    char who[64];
    comm_peer_name(c, peer, who);
    return tcp_fail(c, COMM_EPEER, "%s: %s %s (%s): it died or gave up", label, who,
                    err_no ? "reset the connection" : "closed the connection",
                    err_no ? strerror(err_no) : what);
}

/* Called as received bytes arrive (got = bytes so far), so a reduction can fold
 * them while they are still in cache. */
typedef struct {
    void (*fn)(void *arg, size_t got);
    void *arg;
} on_recv;

/* Sends sb bytes to the ring successor while receiving rb bytes from the
 * predecessor. */
static int ring_sendrecv_cb(comm *c, tcp_state *t, const void *sbuf, size_t sb, void *rbuf,
                            size_t rb, double deadline, const on_recv *cb)
{
    size_t sent = 0, got = 0;
    int next = mod(t->me + 1, t->n), prev = mod(t->me - 1, t->n);
    while (sent < sb || got < rb) {
        int progressed = 0;
        if (sent < sb) {
            ssize_t k = send(t->next_fd, (const char *)sbuf + sent, sb - sent,
                             MSG_DONTWAIT | MSG_NOSIGNAL);
            if (k > 0) {
                sent += (size_t)k;
                atomic_fetch_add_explicit(&c->bytes_sent, (uint64_t)k, memory_order_relaxed);
                progressed = 1;
            } else if (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
                return conn_lost(c, c->label, next, errno, "send");
            }
        }
        if (got < rb) {
            ssize_t k = recv(t->prev_fd, (char *)rbuf + got, rb - got, MSG_DONTWAIT);
            if (k > 0) {
                got += (size_t)k;
                progressed = 1;
                if (cb)
                    cb->fn(cb->arg, got);
            } else if (k == 0) {
                return conn_lost(c, c->label, prev, 0, "EOF");
            } else if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
                return conn_lost(c, c->label, prev, errno, "recv");
            }
        }
        if (progressed)
            continue;
        struct pollfd pf[2];
        int np = 0;
        if (sent < sb)
            pf[np++] = (struct pollfd){.fd = t->next_fd, .events = POLLOUT};
        if (got < rb)
            pf[np++] = (struct pollfd){.fd = t->prev_fd, .events = POLLIN};
        int ms = ms_left(deadline);
        if (ms == 0 || poll(pf, (nfds_t)np, ms) == 0) {
            char who[64];
            comm_peer_name(c, got < rb ? prev : next, who);
            return tcp_fail(c, COMM_ETIMEOUT, "%s: timed out after %.1f s waiting for %s",
                            c->label, c->timeout, who);
        }
    }
    return COMM_OK;
}

static int ring_sendrecv(comm *c, tcp_state *t, const void *sbuf, size_t sb, void *rbuf,
                         size_t rb, double deadline)
{
    return ring_sendrecv_cb(c, t, sbuf, sb, rbuf, rb, deadline, NULL);
}

static int ensure_tmp(comm *c, tcp_state *t, size_t n)
{
    if (n <= t->tmp_cap)
        return COMM_OK;
    for (int i = 0; i < 2; i++) {
        float *p = realloc(t->tmp[i], n * sizeof(float));
        if (!p)
            return tcp_fail(c, COMM_ESYS, "%s: out of memory", c->label);
        t->tmp[i] = p;
    }
    t->tmp_cap = n;
    return COMM_OK;
}

/* Folds the received partial sums into this rank's input as they arrive. */
typedef struct {
    const float *in, *own;
    float *dst;
    comm_op op;
    int avg_div;
    size_t total;                /* floats to receive */
    size_t done;                 /* floats folded */
} fold_state;

static void fold_arrived(void *arg, size_t got)
{
    fold_state *f = arg;
    size_t ready = got / sizeof(float);
    if (ready < f->total && ready - f->done < 4096)
        return;                  /* wait for a worthwhile slice (or the end) */
    const float *srcs[2] = {f->in + f->done, f->own + f->done};
    comm_reduce_f32(f->dst + f->done, NULL, srcs, 2, ready - f->done, f->op, f->avg_div);
    f->done = ready;
}

static int ring_reduce_scatter(comm *c, tcp_state *t, const float *send, float *out, size_t n,
                               comm_op op, double deadline)
{
    int p = t->n, me = t->me, rc;
    if ((rc = ensure_tmp(c, t, (n + (size_t)p - 1) / (size_t)p)) != COMM_OK)
        return rc;
    size_t so, sl;
    comm_chunk(n, p, mod(me - 1, p), &so, &sl);
    const float *sendp = send + so;
    for (int s = 0; s <= p - 2; s++) {
        size_t ro, rl;
        comm_chunk(n, p, mod(me - s - 2, p), &ro, &rl);
        float *in = t->tmp[s & 1];
        int last = s == p - 2;
        fold_state f = {in, send + ro, last ? out : in, op, last ? p : 1, rl, 0};
        on_recv cb = {fold_arrived, &f};
        if ((rc = ring_sendrecv_cb(c, t, sendp, sl * sizeof(float), in, rl * sizeof(float),
                                   deadline, &cb)) != COMM_OK)
            return rc;
        sendp = in;
        sl = rl;
    }
    return COMM_OK;
}

static int ring_all_gather(comm *c, tcp_state *t, char *recv, size_t n, size_t es,
                           double deadline)
{
    int p = t->n, me = t->me, rc;
    for (int s = 0; s <= p - 2; s++) {
        size_t so, sl, ro, rl;
        comm_chunk(n, p, mod(me - s, p), &so, &sl);
        comm_chunk(n, p, mod(me - s - 1, p), &ro, &rl);
        if ((rc = ring_sendrecv(c, t, recv + so * es, sl * es, recv + ro * es, rl * es,
                                deadline)) != COMM_OK)
            return rc;
    }
    return COMM_OK;
}

/* bf16 reduce_scatter, direct over the mesh: chunk q of `in` goes to rank q,
 * chunk me of every peer's `in` arrives in its slot of in16; then out (this
 * rank's chunk) = the rank-order fp32 sum, rounded once. */
static int mesh_reduce_scatter_bf16(comm *c, tcp_state *t, const uint16_t *in, uint16_t *out,
                                    size_t n, comm_op op, double deadline)
{
    int p = t->n, me = t->me;
    size_t ro, rl;
    comm_chunk(n, p, me, &ro, &rl);
    if (rl > t->in16_cap) {
        uint16_t *b = realloc(t->in16, (size_t)p * rl * sizeof(uint16_t));
        if (!b)
            return tcp_fail(c, COMM_ESYS, "%s: out of memory", c->label);
        t->in16 = b;
        t->in16_cap = rl;
    }
    size_t *sent = calloc((size_t)p * 2, sizeof(size_t)), *got = sent ? sent + p : NULL;
    struct pollfd *pf = malloc((size_t)p * 2 * sizeof *pf);
    int rc = sent && pf ? COMM_OK : tcp_fail(c, COMM_ESYS, "%s: out of memory", c->label);
    for (;;) {
        if (rc != COMM_OK)
            break;
        int progressed = 0, pending = 0, np = 0;
        for (int q = 0; q < p && rc == COMM_OK; q++) {
            if (q == me)
                continue;
            size_t qo, ql;
            comm_chunk(n, p, q, &qo, &ql);
            size_t sb = ql * sizeof(uint16_t), rb = rl * sizeof(uint16_t);
            if (sent[q] < sb) {
                ssize_t k = send(t->mesh_fd[q], (const char *)(in + qo) + sent[q], sb - sent[q],
                                 MSG_DONTWAIT | MSG_NOSIGNAL);
                if (k > 0) {
                    sent[q] += (size_t)k;
                    atomic_fetch_add_explicit(&c->bytes_sent, (uint64_t)k, memory_order_relaxed);
                    progressed = 1;
                } else if (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
                    rc = conn_lost(c, c->label, q, errno, "send");
                    break;
                }
            }
            if (got[q] < rb) {
                ssize_t k = recv(t->mesh_fd[q], (char *)(t->in16 + (size_t)q * rl) + got[q],
                                 rb - got[q], MSG_DONTWAIT);
                if (k > 0) {
                    got[q] += (size_t)k;
                    progressed = 1;
                } else if (k == 0) {
                    rc = conn_lost(c, c->label, q, 0, "EOF");
                    break;
                } else if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
                    rc = conn_lost(c, c->label, q, errno, "recv");
                    break;
                }
            }
            short ev = (short)((sent[q] < sb ? POLLOUT : 0) | (got[q] < rb ? POLLIN : 0));
            if (ev) {
                pending = q + 1;
                pf[np++] = (struct pollfd){.fd = t->mesh_fd[q], .events = ev};
            }
        }
        if (rc != COMM_OK || !np)
            break;
        if (progressed)
            continue;
        int ms = ms_left(deadline);
        if (ms == 0 || poll(pf, (nfds_t)np, ms) == 0) {
            char who[64];
            comm_peer_name(c, pending - 1, who);
            rc = tcp_fail(c, COMM_ETIMEOUT, "%s: timed out after %.1f s waiting for %s",
                          c->label, c->timeout, who);
        }
    }
    free(sent);
    free(pf);
    if (rc != COMM_OK || !rl)
        return rc;
    for (int q = 0; q < p; q++)
        t->srcs16[q] = q == me ? in + ro : t->in16 + (size_t)q * rl;
    comm_reduce_bf16(out, NULL, t->srcs16, p, rl, op, p);
    return COMM_OK;
}

static int tcp_all_reduce(comm *c, const void *send, void *recv, size_t n, comm_dtype dt,
                          comm_op op)
{
    tcp_state *t = c->be_state;
    double deadline = clock_now_s() + c->timeout;
    size_t off, len, es = comm_dtype_size(dt);
    comm_chunk(n, t->n, t->me, &off, &len);
    int rc = dt == COMM_BF16
                 ? mesh_reduce_scatter_bf16(c, t, send, (uint16_t *)recv + off, n, op, deadline)
                 : ring_reduce_scatter(c, t, send, (float *)recv + off, n, op, deadline);
    if (rc == COMM_OK)
        rc = ring_all_gather(c, t, (char *)recv, n, es, deadline);
    return rc;
}

static int tcp_reduce_scatter(comm *c, const void *send, void *recv, size_t n, comm_dtype dt,
                              comm_op op)
{
    tcp_state *t = c->be_state;
    double deadline = clock_now_s() + c->timeout;
    if (dt == COMM_BF16)
        return mesh_reduce_scatter_bf16(c, t, send, recv, n, op, deadline);
    return ring_reduce_scatter(c, t, send, recv, n, op, deadline);
}

static int tcp_all_gather(comm *c, const void *send, void *recv, size_t n, size_t es)
{
    tcp_state *t = c->be_state;
    size_t off, len;
    comm_chunk(n, t->n, t->me, &off, &len);
    if (len && (char *)recv + off * es != (const char *)send)
        memmove((char *)recv + off * es, send, len * es);
    return ring_all_gather(c, t, recv, n, es, clock_now_s() + c->timeout);
}

static int tcp_broadcast(comm *c, void *buf, size_t bytes, int root)
{
    tcp_state *t = c->be_state;
    double deadline = clock_now_s() + c->timeout;
    int pos = mod(t->me - root, t->n);
    char *b = buf;
    if (pos == 0)
        return ring_sendrecv(c, t, b, bytes, NULL, 0, deadline);
    if (pos == t->n - 1)
        return ring_sendrecv(c, t, NULL, 0, b, bytes, deadline);
    /* Middle of the chain: forward piece k-1 while receiving piece k. */
    const size_t piece = 1 << 20;
    size_t pieces = (bytes + piece - 1) / piece;
    for (size_t k = 0; k <= pieces; k++) {
        size_t so = (k - 1) * piece, ro = k * piece;
        size_t sl = k >= 1 ? (bytes - so < piece ? bytes - so : piece) : 0;
        size_t rl = k < pieces ? (bytes - ro < piece ? bytes - ro : piece) : 0;
        int rc = ring_sendrecv(c, t, k >= 1 ? b + so : NULL, sl, k < pieces ? b + ro : NULL, rl,
                               deadline);
        if (rc != COMM_OK)
            return rc;
    }
    return COMM_OK;
}

static int tcp_barrier(comm *c)
{
    tcp_state *t = c->be_state;
    memset(t->bytes, 0, (size_t)t->n);
    return ring_all_gather(c, t, t->bytes, (size_t)t->n, 1, clock_now_s() + c->timeout);
}

/* ---- send / recv ---- */

static int tcp_p2p_progress(comm *c, p2p_op *op)
{
    tcp_state *t = c->be_state;
    int fd = t->peer_fd[op->peer];
    for (;;) {
        if (op->hdr_done == 8 && op->done == op->bytes)
            return 1;
        ssize_t k;
        if (op->is_send) {
            if (op->hdr_done == 0)
                op->hdr = op->bytes;
            struct iovec iov[2] = {
                {(char *)&op->hdr + op->hdr_done, 8 - op->hdr_done},
                {op->buf + op->done, op->bytes - op->done},
            };
            struct msghdr m = {.msg_iov = op->hdr_done < 8 ? iov : iov + 1,
                               .msg_iovlen = op->hdr_done < 8 ? 2 : 1};
            k = sendmsg(fd, &m, MSG_DONTWAIT | MSG_NOSIGNAL);
        } else if (op->hdr_done < 8) {
            k = recv(fd, (char *)&op->hdr + op->hdr_done, 8 - op->hdr_done, MSG_DONTWAIT);
        } else {
            k = recv(fd, op->buf + op->done, op->bytes - op->done, MSG_DONTWAIT);
        }
        if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
            return 0;
        if (k <= 0) {
            int e = k < 0 ? errno : 0;
            char label[128];
            snprintf(label, sizeof label, "%s in %s", op->is_send ? "send" : "recv", c->name);
            return conn_lost(c, label, op->peer, e, "EOF");
        }
        size_t moved = (size_t)k;
        if (op->is_send)
            atomic_fetch_add_explicit(&c->bytes_sent, (uint64_t)k, memory_order_relaxed);
        if (op->hdr_done < 8) {
            size_t h = 8 - op->hdr_done < moved ? 8 - op->hdr_done : moved;
            op->hdr_done += h;
            moved -= h;
            if (!op->is_send && op->hdr_done == 8 && op->hdr != op->bytes) {
                char who[64];
                return tcp_fail(c, COMM_EINVAL, "recv from %s in %s: message of %llu bytes, "
                                "expected %zu", comm_peer_name(c, op->peer, who), c->name,
                                (unsigned long long)op->hdr, op->bytes);
            }
        }
        op->done += moved;
    }
}

static unsigned tcp_p2p_token(comm *c)
{
    return 0;
}

static void tcp_p2p_sleep(comm *c, unsigned token, const p2p_wait *w, int nw, double until)
{
    tcp_state *t = c->be_state;
    struct pollfd pf[64 + 1];
    int np = 0;
    for (int i = 0; i < nw && np < 64; i++)
        pf[np++] = (struct pollfd){.fd = t->peer_fd[w[i].peer],
                                   .events = (short)(w[i].is_send ? POLLOUT : POLLIN)};
    pf[np++] = (struct pollfd){.fd = t->kick_fd, .events = POLLIN};
    if (poll(pf, (nfds_t)np, ms_left(until)) > 0 && (pf[np - 1].revents & POLLIN)) {
        uint64_t v;
        if (read(t->kick_fd, &v, sizeof v) < 0) {
            /* nothing to do: the counter was reset by someone else */
        }
    }
}

static void tcp_p2p_kick(comm *c)
{
    tcp_state *t = c->be_state;
    uint64_t one = 1;
    if (write(t->kick_fd, &one, sizeof one) < 0) {
        /* the counter is saturated: a wakeup is pending anyway */
    }
}

static int tcp_p2p_check_peer(comm *c, int peer)
{
    return COMM_OK;  /* a dead peer shows up as EOF / reset on its socket */
}

static void tcp_destroy(comm *c)
{
    comm_cpu_stop(c);
    tcp_state *t = c->be_state;
    if (!t)
        return;
    if (t->next_fd >= 0)
        close(t->next_fd);
    if (t->prev_fd >= 0)
        close(t->prev_fd);
    for (int i = 0; t->peer_fd && i < t->n; i++)
        if (t->peer_fd[i] >= 0)
            close(t->peer_fd[i]);
    for (int i = 0; t->mesh_fd && i < t->n; i++)
        if (t->mesh_fd[i] >= 0)
            close(t->mesh_fd[i]);
    if (t->kick_fd >= 0)
        close(t->kick_fd);
    free(t->peer_fd);
    free(t->mesh_fd);
    free(t->in16);
    free(t->srcs16);
    free(t->tmp[0]);
    free(t->tmp[1]);
    free(t->bytes);
    free(t);
    c->be_state = NULL;
}

static const comm_cpu_ops tcp_ops = {
    .all_reduce = tcp_all_reduce,
    .reduce_scatter = tcp_reduce_scatter,
    .all_gather = tcp_all_gather,
    .broadcast = tcp_broadcast,
    .barrier = tcp_barrier,
    .p2p_progress = tcp_p2p_progress,
    .p2p_token = tcp_p2p_token,
    .p2p_sleep = tcp_p2p_sleep,
    .p2p_kick = tcp_p2p_kick,
    .p2p_check_peer = tcp_p2p_check_peer,
    .bf16_native = 1,
};

/* ---- bootstrap ---- */

/* This node's address as peers should dial it: DTRUN_COMM_ADDR, else the local
 * address of the route to MASTER_ADDR (a UDP connect sends nothing), else the
 * host name's first address, else loopback. */
static void local_addr(char *out, size_t cap)
{
    const dt_env *env = dt_env_get();
    if (env->comm_addr[0]) {
        snprintf(out, cap, "%s", env->comm_addr);
        return;
    }
    snprintf(out, cap, "127.0.0.1");
    const char *master = env->master_addr[0] ? env->master_addr : NULL;
    char host[256];
    if (!master || !*master) {
        if (gethostname(host, sizeof host) != 0)
            return;
        host[sizeof host - 1] = '\0';
    }
    struct addrinfo hints = {.ai_socktype = SOCK_DGRAM}, *ai = NULL;
    if (getaddrinfo(master && *master ? master : host, "9", &hints, &ai) != 0 || !ai)
        return;
    if (master && *master) {
        int fd = socket(ai->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
        struct sockaddr_storage ss;
        socklen_t sl = sizeof ss;
        if (fd >= 0 && connect(fd, ai->ai_addr, ai->ai_addrlen) == 0 &&
            getsockname(fd, (struct sockaddr *)&ss, &sl) == 0)
            getnameinfo((struct sockaddr *)&ss, sl, out, (socklen_t)cap, NULL, 0, NI_NUMERICHOST);
        if (fd >= 0)
            close(fd);
    } else {
        getnameinfo(ai->ai_addr, ai->ai_addrlen, out, (socklen_t)cap, NULL, 0, NI_NUMERICHOST);
    }
    freeaddrinfo(ai);
}

static void tune_socket(int fd)
{
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
}

/* Reads or writes exactly len bytes on a non-blocking socket before deadline. */
static int io_full(int fd, void *buf, size_t len, int writing, double deadline)
{
    size_t done = 0;
    while (done < len) {
        ssize_t k = writing ? send(fd, (char *)buf + done, len - done, MSG_NOSIGNAL)
                            : recv(fd, (char *)buf + done, len - done, 0);
        if (k > 0) {
            done += (size_t)k;
            continue;
        }
        if (k == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR))
            return -1;
        struct pollfd pf = {.fd = fd, .events = (short)(writing ? POLLOUT : POLLIN)};
        int ms = ms_left(deadline);
        if (ms == 0 || poll(&pf, 1, ms) == 0)
            return -1;
    }
    return 0;
}

static int dial(comm *c, const char *endpoint, int peer, int kind, uint64_t id_hash,
                double deadline)
{
    char host[256], port[16], who[64];
    comm_peer_name(c, peer, who);
    if (sscanf(endpoint, "%255s %15s", host, port) != 2)
        return tcp_fail(c, COMM_ESTORE, "%s: bad endpoint '%s' from %s", c->name, endpoint, who);
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICHOST}, *ai;
    if (getaddrinfo(host, port, &hints, &ai) != 0)
        return tcp_fail(c, COMM_ESYS, "%s: bad address %s of %s", c->name, endpoint, who);
    int fd = -1, err = 0;
    while (fd < 0) {
        fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (fd < 0) {
            err = errno;
            break;
        }
        if (connect(fd, ai->ai_addr, ai->ai_addrlen) != 0 && errno == EINPROGRESS) {
            struct pollfd pf = {.fd = fd, .events = POLLOUT};
            int ms = ms_left(deadline);
            socklen_t el = sizeof err;
            if (ms == 0 || poll(&pf, 1, ms) == 0)
                err = ETIMEDOUT;
            else if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el) != 0)
                err = errno;
        } else {
            err = errno == EINPROGRESS ? 0 : errno;
            if (err == 0 || errno == EISCONN)
                err = 0;
        }
        if (err == 0)
            break;
        close(fd);
        fd = -1;
        if (err == ETIMEDOUT || clock_now_s() >= deadline)
            break;
        usleep(20000);  /* refused: retry until the deadline */
    }
    freeaddrinfo(ai);
    if (fd < 0)
        return tcp_fail(c, COMM_EPEER, "%s: cannot connect to %s at %s: %s", c->name, who,
                        endpoint, strerror(err ? err : ETIMEDOUT));
    tune_socket(fd);
    hello_msg h = {HELLO_MAGIC, (uint32_t)kind, (uint32_t)c->rank, 0, id_hash};
    if (io_full(fd, &h, sizeof h, 1, deadline) != 0) {
        close(fd);
        return tcp_fail(c, COMM_EPEER, "%s: hello to %s at %s failed", c->name, who, endpoint);
    }
    return fd;
}

static int tcp_create(comm *c)
{
    c->cpu = &tcp_ops;
    int n = c->size, me = c->rank;
    tcp_state *t = calloc(1, sizeof *t);
    if (!t)
        return comm_fail(c, COMM_ESYS, "%s: out of memory", c->name);
    c->be_state = t;
    t->n = n;
    t->me = me;
    t->next_fd = t->prev_fd = -1;
    t->peer_fd = malloc((size_t)n * sizeof(int));
    t->mesh_fd = malloc((size_t)n * sizeof(int));
    t->srcs16 = malloc((size_t)n * sizeof *t->srcs16);
    t->bytes = malloc((size_t)n);
    t->kick_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (!t->peer_fd || !t->mesh_fd || !t->srcs16 || !t->bytes || t->kick_fd < 0)
        return comm_fail(c, COMM_ESYS, "%s: out of memory / eventfd", c->name);
    for (int i = 0; i < n; i++)
        t->peer_fd[i] = t->mesh_fd[i] = -1;
    double deadline = clock_now_s() + c->timeout;
    uint64_t id_hash = XXH64(c->id, strlen(c->id), 0);

    /* Listen. */
    char addr[256], ep[300], key[400];
    local_addr(addr, sizeof addr);
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICHOST | AI_PASSIVE},
                    *ai;
    if (getaddrinfo(addr, "0", &hints, &ai) != 0)
        return comm_fail(c, COMM_ESYS, "%s: bad local address '%s' (DTRUN_COMM_ADDR?)", c->name,
                         addr);
    int lfd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    char port[16];
    if (lfd < 0 || bind(lfd, ai->ai_addr, ai->ai_addrlen) != 0 || listen(lfd, n + 16) != 0 ||
        getsockname(lfd, (struct sockaddr *)&ss, &sl) != 0 ||
        getnameinfo((struct sockaddr *)&ss, sl, NULL, 0, port, sizeof port, NI_NUMERICSERV) != 0) {
        int e = errno;
        freeaddrinfo(ai);
        if (lfd >= 0)
            close(lfd);
        return comm_fail(c, COMM_ESYS, "%s: cannot listen on %s: %s", c->name, addr, strerror(e));
    }
    freeaddrinfo(ai);
    int len = snprintf(ep, sizeof ep, "%s %s", addr, port);
    snprintf(key, sizeof key, "%s/tcp/%d", c->id, me);
    if (store_set(c->store, key, ep, (size_t)len) != 0) {
        close(lfd);
        return comm_fail(c, COMM_ESTORE, "%s: %s", c->name, store_last_error(c->store));
    }

    /* Dial: the ring successor, and every lower rank for send / recv and for
     * the mesh. */
    int rc = COMM_OK;
    for (int q = 0; q < n && rc == COMM_OK; q++) {
        int ring = q == mod(me + 1, n), p2p = q < me;
        if (!ring && !p2p)
            continue;
        char pe[300];
        snprintf(key, sizeof key, "%s/tcp/%d", c->id, q);
        long pl = store_get(c->store, key, pe, sizeof pe - 1, deadline - clock_now_s());
        if (pl < 0) {
            char who[64];
            rc = comm_fail(c, COMM_ESTORE, "%s: no endpoint from %s: %s", c->name,
                           comm_peer_name(c, q, who), store_last_error(c->store));
            break;
        }
        pe[(size_t)pl < sizeof pe ? (size_t)pl : sizeof pe - 1] = '\0';
        if (ring) {
            int fd = dial(c, pe, q, KIND_RING, id_hash, deadline);
            if (fd < 0) {
                rc = fd;
                break;
            }
            t->next_fd = fd;
        }
        if (p2p) {
            int fd = dial(c, pe, q, KIND_P2P, id_hash, deadline);
            if (fd < 0) {
                rc = fd;
                break;
            }
            t->peer_fd[q] = fd;
            if ((fd = dial(c, pe, q, KIND_MESH, id_hash, deadline)) < 0) {
                rc = fd;
                break;
            }
            t->mesh_fd[q] = fd;
        }
    }

    /* Accept: the predecessor's ring link and every higher rank's p2p and mesh
     * links. */
    int expect = 1 + 2 * (n - 1 - me);
    while (rc == COMM_OK && expect > 0) {
        struct pollfd pf = {.fd = lfd, .events = POLLIN};
        int ms = ms_left(deadline);
        if (ms == 0 || poll(&pf, 1, ms) == 0) {
            rc = comm_fail(c, COMM_ETIMEOUT, "%s: timed out after %.1f s waiting for %d "
                           "connection(s) from peers", c->name, c->timeout, expect);
            break;
        }
        int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (fd < 0)
            continue;
        tune_socket(fd);
        hello_msg h;
        if (io_full(fd, &h, sizeof h, 0, deadline) != 0 || h.magic != HELLO_MAGIC ||
            h.id_hash != id_hash || h.rank >= (uint32_t)n) {
            close(fd);  /* a stray or a stale peer: not ours */
            continue;
        }
        int r = (int)h.rank;
        if (h.kind == KIND_RING && r == mod(me - 1, n) && t->prev_fd < 0) {
            t->prev_fd = fd;
            expect--;
        } else if (h.kind == KIND_P2P && r > me && t->peer_fd[r] < 0) {
            t->peer_fd[r] = fd;
            expect--;
        } else if (h.kind == KIND_MESH && r > me && t->mesh_fd[r] < 0) {
            t->mesh_fd[r] = fd;
            expect--;
        } else {
            close(fd);
        }
    }
    close(lfd);
    return rc;
}

const comm_backend comm_backend_tcp = {
    .name = "tcp",
    .memory = COMM_MEM_HOST,
    .probe = comm_cpu_probe,
    .world_accepts = comm_cpu_world_accepts,
    .create = tcp_create,
    .destroy = tcp_destroy,
    .stream = comm_cpu_stream,
    .coll_start = comm_cpu_coll_start,
    .p2p_start = comm_cpu_p2p_start,
    .wait = comm_cpu_wait,
    .device_wait = comm_cpu_device_wait,
};
