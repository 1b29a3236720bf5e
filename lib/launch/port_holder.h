/* port_holder.h — which process of this machine listens on a TCP port (what
 * `ss -ltnp` tells), so that a port dtrun cannot use is reported with its
 * holder's name: "python3 (pid 4242)". Read from /proc/net/tcp{,6} and the
 * processes' descriptors; another user's process shows only its user. */
#ifndef DTRUN_LAUNCH_PORT_HOLDER_H
#define DTRUN_LAUNCH_PORT_HOLDER_H

#include <stddef.h>
#include <sys/types.h>

typedef struct {
    int listening;   /* a socket of this machine listens on the port */
    pid_t pid;       /* its process, 0 when not visible to this user */
    char comm[64];   /* its name (/proc/PID/comm), "" when not visible */
    long uid;        /* the socket's owner, -1 unknown */
} port_holder;

/* Fills *h for TCP port (any local address, IPv4 or IPv6). Returns h->listening. */
int port_holder_find(int port, port_holder *h);

/* "python3 (pid 4242)", "a process of user alice (uid 1001)", or "a program"
 * when nothing more is known. */
void port_holder_describe(const port_holder *h, char *buf, size_t n);

/* Whether the holder is a dtrun process (an agent hosting a daemon, or `dtrun rdzv`). */
int port_holder_is_dtrun(const port_holder *h);

#endif
