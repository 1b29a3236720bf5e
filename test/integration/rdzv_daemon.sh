#!/usr/bin/env bash
# The standalone rendezvous daemon, `dtrun rdzv`, as a separate process:
#  - port 0 picks a free port, reported on stdout and in --port-file;
#  - a second daemon on the same port fails with one line and exit 1;
#  - bad options: one line, exit 2;
#  - garbage, an oversized frame and a wrong token are refused, each logged in
#    one line, and the daemon keeps serving a good client (a Python client that
#    speaks the wire format from lib/rdzv/frame.h: an independent check of it);
#  - SIGTERM stops it with exit 0.
set -u
cd "$(dirname "$0")/../.."
DTRUN=${DTRUN:-bin/dtrun}
[ -x "$DTRUN" ] || { echo "skip: $DTRUN not built"; exit 77; }
T=$(mktemp -d /tmp/dtrun-rdzv.XXXXXX)
pid=
cleanup() { [ -n "$pid" ] && kill -9 "$pid" 2>/dev/null; rm -rf "$T"; }
trap cleanup EXIT
fail() { echo "FAIL: $*"; echo "--- daemon stderr"; cat "$T/err" 2>/dev/null; exit 1; }

# Bad options: exit 2 and one line naming the option.
"$DTRUN" rdzv --listen 127.0.0.1:0 --bogus >"$T/o" 2>"$T/e"; rc=$?
[ $rc -eq 2 ] && grep -q "unknown option '--bogus'" "$T/e" || fail "bad option: exit $rc, $(cat "$T/e")"
"$DTRUN" rdzv --listen '::1:80' >"$T/o" 2>"$T/e"; rc=$?
[ $rc -eq 2 ] && grep -q "needs brackets" "$T/e" || fail "bad listen: exit $rc, $(cat "$T/e")"
"$DTRUN" rdzv --listen 127.0.0.1:0 --nnodes 3:2 >"$T/o" 2>"$T/e"; rc=$?
[ $rc -eq 2 ] || fail "--nnodes 3:2 accepted (exit $rc)"
"$DTRUN" rdzv >"$T/o" 2>"$T/e"; rc=$?
[ $rc -eq 2 ] && grep -q -- "--listen HOST:PORT is required" "$T/e" || fail "no --listen: exit $rc"
echo "ok: bad options exit 2 with one line"

# Start on a free port.
DTRUN_RDZV_TOKEN=secret-token "$DTRUN" rdzv --listen 127.0.0.1:0 --nnodes 1:2 --join-timeout 5 \
    --port-file "$T/port" >"$T/out" 2>"$T/err" &
pid=$!
for _ in $(seq 100); do [ -s "$T/port" ] && break; sleep 0.05; done
[ -s "$T/port" ] || fail "no port file within 5 s"
port=$(cat "$T/port")
grep -q "^dtrun rdzv: listening on 127.0.0.1:$port\$" "$T/out" || fail "stdout: $(cat "$T/out")"
echo "ok: listening on port $port"

# Port clash.
"$DTRUN" rdzv --listen "127.0.0.1:$port" >"$T/o" 2>"$T/e"; rc=$?
[ $rc -eq 1 ] && grep -q "cannot listen on 127.0.0.1:$port: address already in use" "$T/e" \
    || fail "port clash: exit $rc, $(cat "$T/e")"
echo "ok: port clash is one line, exit 1"

# Debian's python3 first: a pyenv shim costs seconds per start.
PY=/usr/bin/python3
[ -x $PY ] || PY=$(command -v python3) || { echo "skip: python3 missing"; exit 77; }
$PY - "$port" <<'EOF' || fail "python client"
import socket, struct, sys
port = int(sys.argv[1])
HELLO, KV_SET, KV_GET, KV_ADD, REPLY, ERROR = 1, 8, 9, 11, 15, 16

def frame(t, ints=(), strs=()):
    p = b"".join(struct.pack(">q", i) for i in ints)
    for s in strs:
        s = s.encode() if isinstance(s, str) else s
        p += struct.pack(">I", len(s)) + s
    return b"DTR\x01" + bytes([t]) + struct.pack(">I", len(p)) + p

def recv_frame(c):
    h = b""
    while len(h) < 9:
        got = c.recv(9 - len(h))
        if not got: return None
        h += got
    n = struct.unpack(">I", h[5:9])[0]
    p = b""
    while len(p) < n:
        got = c.recv(n - len(p))
        if not got: return None
        p += got
    return h[4], p

def conn():
    c = socket.create_connection(("127.0.0.1", port), timeout=5)
    return c

def text_of(p):  # ERROR: one string
    n = struct.unpack(">I", p[:4])[0]
    return p[4:4 + n].decode()

def closed(c):
    try:
        return c.recv(1) == b""
    except ConnectionResetError:
        return True

# Garbage, an oversized frame, a wrong token: ERROR then closed.
for what, data, want in [
        ("garbage", b"GET / HTTP/1.1\r\n\r\n", "bad magic"),
        ("oversized", b"DTR\x01\x08\x7f\xff\xff\xff", "exceeds"),
        ("wrong version", b"DTR\x09\x04\x00\x00\x00\x08" + b"\0" * 8, "protocol version 9"),
        ("wrong token", frame(HELLO, (), ("nope", "py")), "wrong job token")]:
    c = conn()
    c.sendall(data)
    f = recv_frame(c)
    assert f and f[0] == ERROR and want in text_of(f[1]), (what, f)
    assert closed(c), what + ": not closed"
    print("ok:", what, "refused:", text_of(f[1]))

# A good client is still served.
c = conn()
c.sendall(frame(HELLO, (), ("secret-token", "py")))
t, p = recv_frame(c)
assert t == REPLY and struct.unpack(">q", p[:8])[0] == 0, "hello"
c.sendall(frame(KV_SET, (), ("k", b"\x00value")))
t, p = recv_frame(c)
assert t == REPLY and struct.unpack(">q", p[:8])[0] == 0, "set"
c.sendall(frame(KV_GET, (0,), ("k",)))
t, p = recv_frame(c)
vlen = struct.unpack(">I", p[16:20])[0]
assert t == REPLY and p[20:20 + vlen] == b"\x00value", ("get", p)
c.sendall(frame(KV_ADD, (41,), ("n",)))
c.sendall(frame(KV_ADD, (1,), ("n",)))  # pipelined: answered in order
for want in (41, 42):
    t, p = recv_frame(c)
    assert t == REPLY and struct.unpack(">q", p[8:16])[0] == want, ("add", p)
print("ok: a good client is served after the bad ones (set, get, add)")
EOF

kill -0 "$pid" 2>/dev/null || fail "daemon died"
n=$(grep -c "refused client" "$T/err")
[ "$n" -ge 4 ] || fail "expected one log line per refused client, got $n"
kill -TERM "$pid"
for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.05; done
kill -0 "$pid" 2>/dev/null && fail "SIGTERM did not stop the daemon within 5 s"
wait "$pid"; rc=$?
pid=
[ $rc -eq 0 ] || fail "exit $rc after SIGTERM"
echo "ok: SIGTERM stops the daemon, exit 0"
