#!/usr/bin/env bash
# dtrun-test: waits (it mostly sleeps on timeouts: test/run.sh runs it in the side lane, beside the pool)
# dtrun's ports held by a program that is not dtrun (issues 15.7 and 26.3).
# On this machine the holder is known, and no agent can ever meet there, so the
# launch fails at once, exit 1, in one line naming it ("python3 (pid N)"):
#  - a program that talks (an ssh banner) on the endpoint's port;
#  - one that accepts and says nothing (the old code waited the whole join
#    timeout, 610 s, and its last line no longer said why);
#  - a program launch whose --master-port is taken, before any worker starts.
# A dtrun daemon that is stopped (SIGSTOP) is waited for, with the 3-s line; a
# real daemon waiting for a second node brings no such line; a free
# --master-port runs. A remote endpoint (another network namespace) that stays
# silent is waited for, and the final line repeats the cause.
source "$(dirname "$0")/../helpers/launch_common.bash"
cat >"$T/fake.py" <<'PY'
import socket, sys
mode, port_file, host = sys.argv[1], sys.argv[2], sys.argv[3]
s = socket.socket()
s.bind((host, 0)); s.listen(16)
open(port_file + ".tmp", "w").write(str(s.getsockname()[1]))
import os; os.rename(port_file + ".tmp", port_file)
conns = []
while True:
    c, _ = s.accept(); conns.append(c)
    if mode == "banner": c.sendall(b"SSH-2.0-OpenSSH_9.2p1 Debian-2\r\n")
PY
fake() { # MODE [HOST]: a fake server in the background ($FAKE), its port in $port
  rm -f "$T/port"
  python3 "$T/fake.py" "$1" "$T/port" "${2:-127.0.0.1}" $MARK & FAKE=$!
  wait_for '[ -s '"$T"'/port ] && echo y' y 5 || fail "the fake server did not start"
  port=$(cat "$T/port")
}
# run_fast WHAT DTRUN-ARGS...: dtrun must exit 1 within 5 s; its stderr in $T/err
run_fast() {
  local what=$1 t0; shift
  t0=$(date +%s%N)
  timeout -k 2 30 "$DTRUN" "$@" >"$T/out" 2>"$T/err"; rc=$?
  ms=$(( ($(date +%s%N) - t0) / 1000000 ))
  [ $rc = 1 ] || { cat "$T/err"; fail "$what: exit $rc, want 1"; }
  [ $ms -lt 5000 ] || { cat "$T/err"; fail "$what: took $ms ms, want a few seconds at most"; }
  [ "$(wc -l <"$T/err")" = 1 ] || { cat "$T/err"; fail "$what: want one line"; }
}

fake banner
run_fast banner --nnodes=1 --rdzv-endpoint=127.0.0.1:$port -- true $MARK
grep -q "^dtrun: rendezvous at 127.0.0.1:$port: something that is not a dtrun daemon answered 'SSH-2.0-OpenSSH_9.2p1 Debian-2'; port $port of this machine is held by python3 (pid $FAKE), not by a dtrun daemon: .*give --rdzv-endpoint a port that nothing else uses, or stop python3 (pid $FAKE)$" "$T/err" ||
  { cat "$T/err"; fail "banner: no line naming what answered, who holds the port and what to do"; }
kill $FAKE
echo "ok ($ms ms): $(cat "$T/err")"

fake silent
run_fast silent --nnodes=1 --rdzv-endpoint=localhost:$port -- true $MARK
grep -q "^dtrun: rendezvous at localhost:$port: nothing answered a dtrun HELLO in 2.0 s; port $port of this machine is held by python3 (pid $FAKE), not by a dtrun daemon: .*or stop python3 (pid $FAKE)$" "$T/err" ||
  { cat "$T/err"; fail "silent: the line lacks what was seen / who holds the port / what to do"; }
echo "ok ($ms ms): $(cat "$T/err")"

# --master-port on a port that python3 listens on (any address): before spawn.
kill $FAKE; fake silent 0.0.0.0
run_fast master-port --nproc-per-node=2 --master-port=$port -- sh -c "echo spawned; exec sleep 0 $MARK"
grep -q "^dtrun: --master-port $port: python3 (pid $FAKE) listens on that port of this node, where rank 0 of the program must create its store .*give --master-port a free port, or leave it out and dtrun picks one$" "$T/err" ||
  { cat "$T/err"; fail "master-port: no line naming the holder"; }
! grep -q spawned "$T/out" || fail "master-port: workers were started"
echo "ok ($ms ms): $(cat "$T/err")"
kill $FAKE
mp=$(free_port)
timeout -k 2 30 "$DTRUN" --nproc-per-node=1 --master-port=$mp -- sh -c 'echo port=$MASTER_PORT' >"$T/out" 2>"$T/err" ||
  { cat "$T/err"; fail "a free --master-port did not run"; }
grep -qx "\[default/0\]:port=$mp" "$T/out" || fail "MASTER_PORT is not the --master-port given"
echo "ok: a free --master-port runs"

# A dtrun daemon that does not answer (its agent stopped) is not taken for a
# foreign program: the second agent waits, with the 3-s line.
port=$(free_port)
common=(--nnodes=2 --nproc-per-node=1 --rdzv-endpoint=127.0.0.1:$port --rdzv-id=stopped)
"$DTRUN" "${common[@]}" --node-rank=0 -- true $MARK >"$T/host.out" 2>"$T/host.err" & HOST=$!
wait_for 'grep -c "listening on" '"$T"'/host.err' 1 10 || { cat "$T/host.err"; fail "the first agent did not host"; }
kill -STOP $HOST
AGENT_LIMIT=20 start_agent "${common[@]}" --node-rank=1 -- true $MARK
wait_for 'grep -c "no answer from the rendezvous" '"$T"'/err' 1 9 || { cat "$T/err"; kill -9 $HOST; fail "stopped daemon: no 3-s line"; }
kill -0 $AGENT 2>/dev/null || { cat "$T/err"; kill -9 $HOST; fail "stopped daemon: the agent gave up instead of waiting"; }
kill -TERM $AGENT; wait_agent; kill -9 $HOST; wait $HOST 2>/dev/null
echo "ok: a stopped dtrun daemon is waited for: $(head -1 "$T/err")"

# A genuine daemon waiting for a second node stays quiet about it.
port=$(free_port)
AGENT_LIMIT=20 start_agent --nnodes=2 --nproc-per-node=1 --rdzv-endpoint=127.0.0.1:$port -- true $MARK
sleep 6
kill -TERM $AGENT; wait_agent
! grep -q "no answer from the rendezvous\|not a dtrun daemon\|not by a dtrun" "$T/err" || { cat "$T/err"; fail "a real daemon was taken for a foreign one"; }
echo "ok: a real daemon waiting for another node is not reported"

# Remote: the endpoint is another namespace's address. Last, in a subshell:
# netns_setup exits 77 without root or namespaces, and its exit trap cleans up.
(
  source "$(dirname "$0")/../helpers/netns.bash"
  netns_setup 2
  ip netns exec ${NS[0]} python3 "$T/fake.py" silent "$T/port" 10.77.0.1 $MARK & FAKE=$!
  rm -f "$T/port"; wait_for '[ -s '"$T"'/port ] && echo y' y 5 || fail "remote: the fake server did not start"
  port=$(cat "$T/port")
  t0=$(date +%s)
  ip netns exec ${NS[1]} timeout -k 2 60 "$DTRUN" --nnodes=1 --rdzv-endpoint=10.77.0.1:$port \
    --rdzv-conf=join_timeout=2 -- true $MARK >"$T/out" 2>"$T/err"; rc=$?
  secs=$(( $(date +%s) - t0 ))
  kill $FAKE
  [ $rc = 1 ] || { cat "$T/err"; fail "remote: exit $rc, want 1"; }
  [ $secs -ge 12 ] || { cat "$T/err"; fail "remote: gave up after $secs s, before the join timeout (2 + 10 s)"; }
  grep -q "no answer from the rendezvous at 10.77.0.1:$port after 3 s: nobody answered" "$T/err" || { cat "$T/err"; fail "remote: no 3-s line"; }
  last=$(tail -1 "$T/err")
  [[ $last == "dtrun: rendezvous at 10.77.0.1:$port: no answer within 12.0 s: nobody answered: the port accepts connections but said nothing to a dtrun HELLO"*"stop what holds port $port" ]] ||
    { cat "$T/err"; fail "remote: the last line does not repeat the cause: $last"; }
  echo "ok ($secs s): $last"
); rc=$?
case $rc in
  0) ;;
  77) echo "skipped the remote case (no network namespaces here)";;
  *) exit $rc;;
esac
echo "PASS launch_rdzv_foreign"
