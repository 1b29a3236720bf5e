/* frame_sock.h — frames over a blocking TCP socket, with deadlines. Internal to
 * the rendezvous and KV clients (lib/rdzv/rdzv_client.c, lib/rdzv/kv_client.c); the
 * daemon uses libuv instead. Every deadline is a clock_now_ms() value
 * (lib/util/clock.h). */
#ifndef DTRUN_FRAME_SOCK_H
#define DTRUN_FRAME_SOCK_H

#include <stddef.h>
#include <stdint.h>

#include "lib/rdzv/frame.h"
#include "lib/util/clock.h"

/* "host:port", with brackets around an IPv6 host. */
void frame_format_endpoint(char *out, size_t outlen, const char *host, int port);

/* Connects to host:port before deadline_ms, retrying refused / unreachable
 * connects (the daemon may start later). Returns a close-on-exec fd with
 * TCP_NODELAY, or -1 with one line in err that names the endpoint. */
int frame_connect(const char *host, int port, int64_t deadline_ms, char *err, size_t errlen);

typedef struct frame_sock frame_sock;

frame_sock *frame_sock_new(int fd);            /* takes the fd */
int frame_sock_fd(const frame_sock *s);
void frame_sock_close(frame_sock *s);          /* closes the fd; safe with NULL */

/* Sends all of b before deadline_ms. 0, or -1 with err. */
int frame_sock_send(frame_sock *s, const frame_buf *b, int64_t deadline_ms, char *err, size_t errlen);

/* Receives one frame before deadline_ms: 1 (m filled, frame_msg_free it),
 * 0 on timeout, -1 on a closed connection or bad frame (err says which). */
int frame_sock_recv(frame_sock *s, frame_msg *m, int64_t deadline_ms, char *err, size_t errlen);

/* Like recv, but returns 0 at once if no complete frame is buffered or readable. */
int frame_sock_poll(frame_sock *s, frame_msg *m, char *err, size_t errlen);

#endif
