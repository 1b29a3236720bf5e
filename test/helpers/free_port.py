#!/usr/bin/env python3
"""Prints a TCP port on 127.0.0.1 that nothing listens on, for a test's
rendezvous endpoint. Chosen below the kernel's ephemeral range
(/proc/sys/net/ipv4/ip_local_port_range), at random: a port the kernel hands
out for binding to port 0 is one outgoing connections also take their local
ports from, so between this check and the daemon's bind another process's
connection could take it (seen once: the daemon could not listen, its peer
was refused for 30 s)."""
import random
import socket

low = 32768
try:
    with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
        low = int(f.read().split()[0])
except (OSError, ValueError, IndexError):
    pass
lo, hi = 10000, max(10001, low - 1)
for _ in range(500):
    port = random.randint(lo, hi)
    s = socket.socket()
    try:
        s.bind(("127.0.0.1", port))
    except OSError:
        continue
    finally:
        s.close()
    print(port)
    break
else:
    raise SystemExit("free_port: no free port in %d..%d" % (lo, hi))
