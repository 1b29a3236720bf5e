/* rdzv_probe.h — tell a dtrun rendezvous daemon from another program on its port. */
#ifndef DTRUN_RDZV_PROBE_H
#define DTRUN_RDZV_PROBE_H

#include <stddef.h>

/* Opens a second connection to host:port, sends HELLO with token and waits up to
 * timeout_ms. 1: a dtrun daemon answered; 0: something else answered (who
 * says what, its first bytes); -1: nobody answered, or no connection (who says
 * which). */
int rdzv_probe(const char *host, int port, const char *token, int timeout_ms, char *who, size_t wholen);

#endif
