#!/usr/bin/env bash
# Two agents on this machine as two nodes meeting at 127.0.0.1:PORT: whichever
# binds the port hosts the daemon. Ranks follow --node-rank; all 4 workers meet
# at one KV barrier; a failure on one node stops the other; a dead node (agent
# killed with SIGKILL) is noticed by heartbeat and ends the job.
source "$(dirname "$0")/../helpers/launch_common.bash"
build_kv_barrier
port=$(free_port)
common=(--nnodes=2 --nproc-per-node=2 --rdzv-endpoint=127.0.0.1:$port --rdzv-conf=join_timeout=20,heartbeat_timeout=2,keep_alive_interval=0.5)
node() { # NAME RDZV-ID NODE-RANK WORKER-SCRIPT
  timeout -k 2 40 "$DTRUN" "${common[@]}" --rdzv-id=$2 --node-rank=$3 -- sh -c "$4" $MARK >"$T/$1.out" 2>"$T/$1.err" &
}
W='echo "node $GROUP_RANK/$GROUP_WORLD_SIZE rank $RANK/$WORLD_SIZE local $LOCAL_RANK master $MASTER_ADDR:$MASTER_PORT"; exec '"$T"'/kv_barrier mn 20'
node a mn1 1 "$W"; a=$!
node b mn1 0 "$W"; b=$!
wait $a; ra=$?; wait $b; rb=$?
[ $ra -eq 0 ] && [ $rb -eq 0 ] || { cat "$T"/a.* "$T"/b.*; fail "two nodes: exit $ra, $rb"; }
for r in 2 3; do grep -q "^\[default/$r\]:node 1/2 rank $r/4 local $((r - 2)) " "$T/a.out" || { cat "$T/a.out"; fail "node 1 rank $r"; }; done
for r in 0 1; do grep -q "^\[default/$r\]:node 0/2 rank $r/4 local $r " "$T/b.out" || fail "node 0 rank $r"; done
[ "$(cat "$T/a.out" "$T/b.out" | grep -c 'kv_barrier: rank . of 4 passed mn')" = 4 ] || fail "4 ranks did not meet"
m=$(sed -n 's/.* master \(.*\)$/\1/p' "$T/a.out" "$T/b.out" | sort -u)
[ "$(echo "$m" | wc -l)" = 1 ] || fail "nodes disagree on MASTER_ADDR:PORT: $m"
echo "ok: 2 nodes x 2 workers, ranks by node rank, one barrier, one master ($m)"

# A worker fails on node 1: node 1 exits with its status, node 0 is told and exits 1.
port=$(free_port); common[2]=--rdzv-endpoint=127.0.0.1:$port
node a mn2 0 'exec sleep 30'; a=$!
node b mn2 1 'if [ $RANK = 3 ]; then sleep 0.5; exit 5; fi; exec sleep 30'; b=$!
wait $a; ra=$?; wait $b; rb=$?
[ $rb -eq 5 ] && [ $ra -eq 1 ] || { cat "$T"/a.err "$T"/b.err; fail "remote failure: exit $ra (want 1), $rb (want 5)"; }
grep -q "worker rank 3 exited with status 5" "$T/a.err" || fail "node 0 was not told why"
echo "ok: a failure on one node stops the other"

# The same failure with --max-restarts=1 on both: every node restarts, the job succeeds.
port=$(free_port); common[2]=--rdzv-endpoint=127.0.0.1:$port
common+=(--max-restarts=1)
R='echo "rank $RANK restart $TORCHELASTIC_RESTART_COUNT"; if [ $RANK = 3 ] && [ $TORCHELASTIC_RESTART_COUNT = 0 ]; then exit 5; fi; exec '"$T"'/kv_barrier again 20'
node a mn4 0 "$R"; a=$!
node b mn4 1 "$R"; b=$!
wait $a; ra=$?; wait $b; rb=$?
[ $ra -eq 0 ] && [ $rb -eq 0 ] || { cat "$T"/a.err "$T"/b.err; fail "restart across nodes: exit $ra, $rb"; }
[ "$(cat "$T/a.out" "$T/b.out" | grep -c 'kv_barrier: rank . of 4 passed again')" = 4 ] || fail "4 ranks did not meet after the restart"
[ "$(cat "$T/a.out" "$T/b.out" | grep -c 'restart 1$')" = 4 ] || fail "not every worker restarted"
echo "ok: a failure restarts the workers of both nodes"
unset 'common[${#common[@]}-1]'

# Node 1's agent dies (SIGKILL): its workers die with it; node 0 notices.
port=$(free_port); common[2]=--rdzv-endpoint=127.0.0.1:$port
node a mn3 0 'echo up; exec sleep 30'; a=$!
# a hosts the daemon (it binds first), so b's death is a dead node, not a lost daemon.
wait_for 'grep -c "listening on" '"$T"'/a.err' 1 10 || fail "node 0 did not host"
"$DTRUN" "${common[@]}" --rdzv-id=mn3 --node-rank=1 -- sh -c 'echo up; exec sleep 30' $MARK >"$T/b.out" 2>"$T/b.err" &
b=$!
wait_for 'cat '"$T"'/a.out '"$T"'/b.out | grep -c ":up$"' 4 20 || fail "workers did not start"
start=$(date +%s)
kill -9 $b
wait $a; ra=$?
[ $ra -eq 1 ] || { cat "$T/a.err"; fail "surviving node exited $ra, want 1"; }
[ $(( $(date +%s) - start )) -le 10 ] || fail "the dead node was noticed too late"
grep -q "^dtrun: .*dead" "$T/a.err" || { cat "$T/a.err"; fail "no line about the dead node"; }
echo "ok: a dead node ends the job on the other node ($(grep '^dtrun: .*dead' "$T/a.err" | head -1))"

# The other node never comes: the join timeout ends the wait with one line, exit 1.
port=$(free_port)
start=$(date +%s)
timeout -k 2 20 "$DTRUN" --nnodes=2 --nproc-per-node=1 --rdzv-endpoint=127.0.0.1:$port \
  --rdzv-conf=join_timeout=2 -- true >"$T/a.out" 2>"$T/a.err"; rc=$?
[ $rc -eq 1 ] || { cat "$T/a.err"; fail "lonely node exited $rc, want 1"; }
grep -q "^dtrun: rendezvous at 127.0.0.1:$port: timed out after 2.0 s: 1 of min 2 nodes joined" "$T/a.err" || { cat "$T/a.err"; fail "no timeout line"; }
[ $(( $(date +%s) - start )) -le 8 ] || fail "the join timeout took too long"
echo "ok: join timeout"
