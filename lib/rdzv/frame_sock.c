/* frame_sock.c — frames over a blocking-style TCP socket with deadlines.
 *
 * The socket itself is non-blocking and every wait is a poll() bounded by the
 * caller's deadline, so no client call can hang past its timeout. */
#include "lib/rdzv/frame_sock.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

struct frame_sock {
    int fd;
    frame_decoder *dec;
};

static int remaining_ms(int64_t deadline)
{
    int64_t r = deadline - clock_now_ms();
    if (r < 0) return 0;
    return r > 1000000000 ? 1000000000 : (int)r;
}

void frame_format_endpoint(char *out, size_t outlen, const char *host, int port)
{
    if (strchr(host, ':'))
        snprintf(out, outlen, "[%s]:%d", host, port);
    else
        snprintf(out, outlen, "%s:%d", host, port);
}

static void sleep_ms(int ms)
{
    struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {}
}

/* One non-blocking connect attempt bounded by deadline: fd, or -1 and *why. */
static int try_connect(const struct addrinfo *ai, int64_t deadline, int *why)
{
    int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, ai->ai_protocol);
    if (fd < 0) { *why = errno; return -1; }
    if (connect(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
        if (errno != EINPROGRESS) { *why = errno; close(fd); return -1; }
        struct pollfd p = { fd, POLLOUT, 0 };
        int rc;
        while ((rc = poll(&p, 1, remaining_ms(deadline))) < 0 && errno == EINTR) {}
        if (rc == 0) { *why = ETIMEDOUT; close(fd); return -1; }
        int soerr = 0;
        socklen_t sl = sizeof soerr;
        if (rc < 0 || getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) != 0 || soerr) {
            *why = soerr ? soerr : errno;
            close(fd);
            return -1;
        }
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return fd;
}

int frame_connect(const char *host, int port, int64_t deadline, char *err, size_t errlen)
{
    char ep[300];
    frame_format_endpoint(ep, sizeof ep, host, port);
    if (port <= 0 || port > 65535) {
        snprintf(err, errlen, "cannot connect to %s: port must be 1-65535", ep);
        return -1;
    }
    int64_t start = clock_now_ms();
    int backoff = 20, why = 0, gai = 0;
    char portstr[16];
    snprintf(portstr, sizeof portstr, "%d", port);
    for (;;) {
        struct addrinfo hints = { 0 }, *res = NULL;
        hints.ai_family = AF_UNSPEC;
        hints.ai_socktype = SOCK_STREAM;
        gai = getaddrinfo(host, portstr, &hints, &res);
        if (gai == 0) {
            for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
                int fd = try_connect(ai, deadline, &why);
                if (fd >= 0) { freeaddrinfo(res); return fd; }
            }
            freeaddrinfo(res);
        } else if (gai != EAI_AGAIN) {
            /* A name that does not resolve is a typo far more often than a
             * race, so say so at once instead of retrying until the deadline. */
            snprintf(err, errlen, "cannot resolve host '%s' of %s: %s", host, ep, gai_strerror(gai));
            return -1;
        }
        /* Refused, unreachable, timed out: the daemon may not listen yet. */
        if (why == EACCES || why == EPERM || why == EAFNOSUPPORT) break;
        int left = remaining_ms(deadline);
        if (left <= 0) break;
        sleep_ms(backoff < left ? backoff : left);
        if (backoff < 500) backoff *= 2;
    }
    double secs = (double)(clock_now_ms() - start) / 1000.0;
    snprintf(err, errlen, "cannot reach rendezvous daemon at %s: %s (retried for %.1f s)", ep,
             gai ? gai_strerror(gai) : strerror(why ? why : ETIMEDOUT), secs);
    return -1;
}

frame_sock *frame_sock_new(int fd)
{
    frame_sock *s = calloc(1, sizeof *s);
    if (!s) { close(fd); return NULL; }
    s->fd = fd;
    s->dec = frame_decoder_new();
    if (!s->dec) { close(fd); free(s); return NULL; }
    return s;
}

int frame_sock_fd(const frame_sock *s) { return s->fd; }

void frame_sock_close(frame_sock *s)
{
    if (!s) return;
    close(s->fd);
    frame_decoder_free(s->dec);
    free(s);
}

int frame_sock_send(frame_sock *s, const frame_buf *b, int64_t deadline, char *err, size_t errlen)
{
    size_t off = 0;
    while (off < b->len) {
        ssize_t n = send(s->fd, b->data + off, b->len - off, MSG_NOSIGNAL);
        if (n > 0) { off += (size_t)n; continue; }
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            struct pollfd p = { s->fd, POLLOUT, 0 };
            int rc = poll(&p, 1, remaining_ms(deadline));
            if (rc == 0) { snprintf(err, errlen, "send timed out"); return -1; }
            continue;
        }
        snprintf(err, errlen, "send failed: %s", n < 0 ? strerror(errno) : "connection closed");
        return -1;
    }
    return 0;
}

/* Reads what is available into the decoder: 1 read something, 0 nothing yet,
 * -1 closed or failed. */
static int read_some(frame_sock *s, char *err, size_t errlen)
{
    uint8_t buf[65536];
    ssize_t n = recv(s->fd, buf, sizeof buf, 0);
    if (n > 0) {
        if (frame_decoder_feed(s->dec, buf, (size_t)n) != 0) {
            snprintf(err, errlen, "out of memory");
            return -1;
        }
        return 1;
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return 0;
    snprintf(err, errlen, "connection closed by the daemon%s%s", n < 0 ? ": " : "", n < 0 ? strerror(errno) : "");
    return -1;
}

static int next_frame(frame_sock *s, frame_msg *m, char *err, size_t errlen)
{
    char why[256];
    int rc = frame_decoder_next(s->dec, m, why, sizeof why);
    if (rc == FRAME_DEC_ERROR) {
        snprintf(err, errlen, "bad frame from the daemon: %s", why);
        return -1;
    }
    return rc == FRAME_DEC_READY;
}

int frame_sock_recv(frame_sock *s, frame_msg *m, int64_t deadline, char *err, size_t errlen)
{
    for (;;) {
        int rc = next_frame(s, m, err, errlen);
        if (rc != 0) return rc;
        struct pollfd p = { s->fd, POLLIN, 0 };
        int left = remaining_ms(deadline);
        int pr = poll(&p, 1, left);
        if (pr < 0 && errno == EINTR) continue;
        if (pr == 0) return 0;
        if (read_some(s, err, errlen) < 0) return -1;
    }
}

int frame_sock_poll(frame_sock *s, frame_msg *m, char *err, size_t errlen)
{
    int rc = next_frame(s, m, err, errlen);
    if (rc != 0) return rc;
    int got = read_some(s, err, errlen);
    if (got <= 0) return got;
    return next_frame(s, m, err, errlen);
}
