#!/usr/bin/env bash
# Agents (the real launcher) meeting at a standalone daemon, `dtrun rdzv`:
#  - two agents of 2 workers each get ranks 0-3 and the round's KV namespace;
#  - a joiner with the wrong token is refused and the daemon goes on;
#  - an agent killed with SIGKILL: the other reports the dead node and exits
#    non-zero at once (the connection drop is seen by the daemon);
#  - an agent frozen with SIGSTOP: the other hears "no heartbeat" within the
#    daemon's heartbeat timeout and exits non-zero.
set -u
cd "$(dirname "$0")/../.."
DTRUN=${DTRUN:-bin/dtrun}
[ -x "$DTRUN" ] || { echo "skip: $DTRUN not built"; exit 77; }
"$DTRUN" --help 2>&1 | grep -q -- "--rdzv-endpoint" || { echo "skip: launcher has no --rdzv-endpoint yet"; exit 77; }
T=$(mktemp -d /tmp/dtrun-rdzv-sa.XXXXXX)
pids=()
cleanup() { for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done; rm -rf "$T"; }
trap cleanup EXIT
fail() { echo "FAIL: $*"; for f in "$T"/*.out "$T"/d.err; do echo "--- $f"; tail -20 "$f"; done; exit 1; }

"$DTRUN" rdzv --listen 127.0.0.1:0 --token tok-sa --nnodes 2 --heartbeat-timeout 2 --port-file "$T/port" \
    >/dev/null 2>"$T/d.err" &
daemon=$!
pids+=($daemon)
for _ in $(seq 100); do [ -s "$T/port" ] && break; sleep 0.05; done
port=$(cat "$T/port") || fail "no port"
EP=127.0.0.1:$port
# Starts an agent in the background; its pid (the dtrun process itself, so that
# signals reach it) is left in $apid.
agent() { # name, then the program
    local name=$1; shift
    DTRUN_RDZV_TOKEN=${TOKEN:-tok-sa} "$DTRUN" --nnodes=2 --nproc-per-node=2 \
        --rdzv-endpoint="$EP" --rdzv-id=tok-sa -- "$@" >"$T/$name.out" 2>&1 &
    apid=$!
    pids+=($apid)
}
# Waits for pid at most secs seconds; its exit status, or 124 on timeout.
wait_for_exit() {
    local pid=$1 secs=$2
    for _ in $(seq $((secs * 20))); do kill -0 "$pid" 2>/dev/null || break; sleep 0.05; done
    kill -0 "$pid" 2>/dev/null && { kill -9 "$pid"; wait "$pid" 2>/dev/null; return 124; }
    wait "$pid"
}
rounds_closed() { grep -c 'round [0-9]* closed' "$T/d.err"; }
now_ms() { echo $(( $(date +%s%N) / 1000000 )); }

# 1. A round of two agents.
agent a sh -c 'echo "rank=$RANK world=$WORLD_SIZE prefix=$DTRUN_KV_PREFIX"'; a=$apid
agent b sh -c 'echo "rank=$RANK world=$WORLD_SIZE prefix=$DTRUN_KV_PREFIX"'; b=$apid
wait_for_exit $a 20; ra=$?
wait_for_exit $b 20; rb=$?
[ $ra -eq 0 ] && [ $rb -eq 0 ] || fail "agents exited $ra $rb"
ranks=$(cat "$T/a.out" "$T/b.out" | grep -o 'rank=[0-9]* world=4 prefix=round0/' | sort | tr '\n' ' ')
[ "$ranks" = "rank=0 world=4 prefix=round0/ rank=1 world=4 prefix=round0/ rank=2 world=4 prefix=round0/ rank=3 world=4 prefix=round0/ " ] \
    || fail "ranks: $ranks"
echo "ok: two agents, ranks 0-3, namespace round0/"

# 2. Wrong token: refused, one line; the daemon goes on.
TOKEN=wrong agent w true
wait_for_exit $apid 20; rc=$?
[ $rc -ne 0 ] && [ $rc -ne 124 ] && grep -q "wrong job token" "$T/w.out" || fail "wrong token: exit $rc"
kill -0 $daemon || fail "daemon died"
echo "ok: wrong token refused (exit $rc): $(grep -m1 'wrong job token' "$T/w.out")"

# 3. SIGKILL of an agent: the other reports the dead node, exits non-zero.
agent c sleep 30; c=$apid
agent d sleep 30; d=$apid
for _ in $(seq 100); do [ "$(rounds_closed)" -ge 2 ] && break; sleep 0.1; done
sleep 0.3
kill -9 $c
start=$(now_ms)
wait_for_exit $d 15; rd=$?
ms=$(( $(now_ms) - start ))
[ $rd -ne 0 ] && [ $rd -ne 124 ] && grep -q "dead: connection lost" "$T/d.out" || fail "after SIGKILL: exit $rd"
echo "ok: SIGKILLed agent reported in $ms ms, the other exited $rd: $(grep -m1 'dead' "$T/d.out")"

# 4. SIGSTOP of an agent: no heartbeats; reported within the 2 s timeout.
agent e sleep 30; e=$apid
agent f sleep 30; f=$apid
for _ in $(seq 100); do [ "$(rounds_closed)" -ge 3 ] && break; sleep 0.1; done
sleep 0.3
kill -STOP $e
start=$(now_ms)
wait_for_exit $f 15; rf=$?
ms=$(( $(now_ms) - start ))
kill -9 $e
[ $rf -ne 0 ] && [ $rf -ne 124 ] && grep -q "dead: no heartbeat for" "$T/f.out" || fail "after SIGSTOP: exit $rf"
[ $ms -lt 6000 ] || fail "frozen agent reported after $ms ms (heartbeat timeout 2 s)"
echo "ok: frozen agent declared dead in $ms ms, the other exited $rf: $(grep -m1 'no heartbeat' "$T/f.out")"
kill -0 $daemon || fail "daemon died"
