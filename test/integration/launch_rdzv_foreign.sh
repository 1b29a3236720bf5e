#!/usr/bin/env bash
# The rendezvous port held by a program that is not a dtrun daemon (issue
# 15.7): the agent does not wait in silence. A program that talks (an ssh
# banner) is named at once, exit 1; one that accepts and says nothing is
# reported after a few seconds (who answered: nobody) with what to do; a real
# daemon waiting for a second node brings no such line.
source "$(dirname "$0")/../helpers/launch_common.bash"
cat >"$T/fake.py" <<'PY'
import socket, sys
mode, port_file = sys.argv[1], sys.argv[2]
s = socket.socket()
s.bind(("127.0.0.1", 0)); s.listen(16)
open(port_file + ".tmp", "w").write(str(s.getsockname()[1]))
import os; os.rename(port_file + ".tmp", port_file)
conns = []
while True:
    c, _ = s.accept(); conns.append(c)
    if mode == "banner": c.sendall(b"SSH-2.0-OpenSSH_9.2p1 Debian-2\r\n")
PY
fake() { # MODE: a fake server in the background, its port in $port
  rm -f "$T/port"
  python3 "$T/fake.py" "$1" "$T/port" $MARK & FAKE=$!
  wait_for '[ -s '"$T"'/port ] && echo y' y 5 || fail "the fake server did not start"
  port=$(cat "$T/port")
}

fake banner
t0=$(date +%s)
timeout -k 2 20 "$DTRUN" --nnodes=1 --rdzv-endpoint=127.0.0.1:$port -- true $MARK >"$T/out" 2>"$T/err"; rc=$?
kill $FAKE
[ $rc = 1 ] || { cat "$T/err"; fail "banner: exit $rc, want 1"; }
[ $(( $(date +%s) - t0 )) -lt 5 ] || fail "banner: took too long"
grep -q "^dtrun: rendezvous at 127.0.0.1:$port: something that is not a dtrun daemon answered 'SSH-2.0-OpenSSH_9.2p1 Debian-2'; .*give --rdzv-endpoint a port that nothing else uses" "$T/err" ||
  { cat "$T/err"; fail "banner: no line naming what answered and what to do"; }
echo "ok: $(cat "$T/err")"

fake silent
AGENT_LIMIT=20 start_agent --nnodes=1 --rdzv-endpoint=127.0.0.1:$port -- true $MARK
wait_for 'grep -c "no answer from the rendezvous" '"$T"'/err' 1 9 || { cat "$T/err"; fail "silent: no line within 9 s"; }
grep -q "nobody answered: .*give --rdzv-endpoint a free port or stop what holds port $port" "$T/err" || { cat "$T/err"; fail "silent: the line lacks who answered / what to do"; }
kill -TERM $AGENT; wait_agent; kill $FAKE
echo "ok: $(head -1 "$T/err")"

# A genuine daemon waiting for a second node stays quiet about it.
port=$(free_port)
AGENT_LIMIT=20 start_agent --nnodes=2 --nproc-per-node=1 --rdzv-endpoint=127.0.0.1:$port -- true $MARK
sleep 6
kill -TERM $AGENT; wait_agent
! grep -q "no answer from the rendezvous\|not a dtrun daemon" "$T/err" || { cat "$T/err"; fail "a real daemon was taken for a foreign one"; }
echo "ok: a real daemon waiting for another node is not reported"
