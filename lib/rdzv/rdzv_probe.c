/* rdzv_probe.c — who holds a rendezvous endpoint that stays silent.
 *
 * A dtrun daemon answers a JOIN only when the round closes, so silence after a
 * JOIN may be a daemon waiting for other nodes — or any other program on that
 * port, waiting for a request in its own protocol (an HTTP server, a database).
 * A second connection tells them apart: a daemon answers HELLO at once (OK,
 * or "wrong job token"); anything else answers with bytes that are no frame,
 * closes, or says nothing. */
#include "lib/rdzv/rdzv_probe.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "lib/rdzv/frame.h"
#include "lib/rdzv/frame_sock.h"
#include "lib/util/clock.h"
#include "lib/util/errline.h"

/* The first bytes of an answer, printable: "HTTP/1.0 400 Bad Request\r\n" -> 'HTTP/1.0 400 Bad Request' */
static void printable(const unsigned char *p, size_t n, char *out, size_t outlen)
{
    size_t k = 0;
    for (size_t i = 0; i < n && k + 5 < outlen; i++) {
        unsigned char c = p[i];
        if (c == '\r' || c == '\n') {
            if (k > 0 && out[k - 1] != ' ') out[k++] = ' ';
        } else if (c >= 0x20 && c < 0x7f) {
            out[k++] = (char)c;
        } else {
            k += (size_t)snprintf(out + k, outlen - k, "\\x%02x", c);
        }
    }
    while (k > 0 && out[k - 1] == ' ') k--;
    out[k] = 0;
}

int rdzv_probe(const char *host, int port, const char *token, int timeout_ms, char *who, size_t wholen)
{
    int64_t deadline = clock_now_ms() + timeout_ms;
    char why[512];
    int fd = frame_connect(host, port, deadline, why, sizeof why);
    if (fd < 0) return errline(who, wholen, "a second connection failed: %s", why);
    frame_str strs[2] = {FRAME_STR(token ? token : ""), FRAME_STR("dtrun-probe")};
    frame_buf b = {0};
    if (frame_encode(&b, FRAME_HELLO, NULL, strs, NULL, 0) == 0) {
        size_t off = 0;
        while (off < b.len) {
            ssize_t w = write(fd, b.data + off, b.len - off);
            if (w < 0 && errno == EINTR) continue;
            if (w <= 0) break;
            off += (size_t)w;
        }
    }
    frame_buf_free(&b);
    unsigned char got[256];
    size_t n = 0;
    int closed = 0;
    while (n < sizeof got) {
        int64_t left = deadline - clock_now_ms();
        if (left <= 0) break;
        struct pollfd p = {fd, POLLIN, 0};
        int pr = poll(&p, 1, (int)left);
        if (pr < 0 && errno == EINTR) continue;
        if (pr <= 0) break;
        ssize_t r = read(fd, got + n, sizeof got - n);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) { closed = 1; break; }
        n += (size_t)r;
        /* a frame or a line is enough to judge */
        frame_decoder *d = frame_decoder_new();
        int verdict = -1;
        if (d && frame_decoder_feed(d, got, n) == 0) {
            frame_msg m;
            char e[128];
            int rc = frame_decoder_next(d, &m, e, sizeof e);
            if (rc == FRAME_DEC_READY) {
                verdict = m.type == FRAME_REPLY || m.type == FRAME_ERROR;
                frame_msg_free(&m);
            } else if (rc == FRAME_DEC_ERROR) {
                verdict = 0;
            }
        }
        frame_decoder_free(d);
        if (verdict == 1) {
            close(fd);
            snprintf(who, wholen, "a dtrun rendezvous daemon");
            return 1;
        }
        if (verdict == 0 && memchr(got, '\n', n)) break;
    }
    close(fd);
    if (n > 0) {
        char text[200];
        printable(got, n < 80 ? n : 80, text, sizeof text);
        snprintf(who, wholen, "something that is not a dtrun daemon answered '%s'", text);
        return 0;
    }
    if (closed) {
        snprintf(who, wholen, "something that is not a dtrun daemon accepted the connection and closed it without a word");
        return 0;
    }
    snprintf(who, wholen, "nobody answered: the port accepts connections but said nothing to a dtrun HELLO in %.1f s "
             "(a program other than dtrun, or a daemon that is stopped or overloaded)", timeout_ms / 1000.0);
    return -1;
}
