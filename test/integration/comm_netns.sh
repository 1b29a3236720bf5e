#!/usr/bin/env bash
# The CPU transport between real nodes: three network namespaces joined by a
# bridge (test/helpers/netns.bash, as in launch_netns.sh), one dtrun job of 3 x 2
# workers over real addresses. Each worker (test/helpers/comm_check.c) bootstraps
# its communicators through the agent's KV store and checks that the world and a
# cross-node group use tcp and its node's group shm, then runs every collective
# (f32 and bf16, counts 0, 7 and 1Mi+3, blocking and async) against references.
# Then a node dies mid-collective: its agent is SIGKILLed (its workers follow by
# their death signal); every surviving worker must fail within the comm timeout
# and the whole job must exit non-zero, promptly. Needs root and ip(8).
source "$(dirname "$0")/../helpers/launch_common.bash"
source "$(dirname "$0")/../helpers/netns.bash"
netns_setup 3   # NS[0..2] = 10.77.0.1-3 (or exit 77 with the reason)
AG=()   # the three agents' pids (ip netns exec execs dtrun: the pid is dtrun's)
WD=""   # their watchdog
comm_cleanup() {
  local p
  [ -n "$WD" ] && { pkill -P "$WD" 2>/dev/null; kill "$WD" 2>/dev/null; }
  for p in "${AG[@]}"; do kill -9 "$p" 2>/dev/null; done
  netns_cleanup
}
trap comm_cleanup EXIT

# comm_check links against the library with the Makefile's own link flags
# (they name cudart when the build has the CUDA backend).
ldlibs=$(make -s --no-print-directory --eval 'dtrun-print-ldlibs: ; @echo $(LDLIBS)' dtrun-print-ldlibs 2>/dev/null) ||
  fail "cannot ask make for LDLIBS"
# shellcheck disable=SC2086
gcc -std=c11 -D_GNU_SOURCE -O2 -Wall -Wextra -Wshadow -I. test/helpers/comm_check.c \
    build/libdtrun.a $ldlibs -o "$T/comm_check" || fail "cannot build test/helpers/comm_check.c"

start_nodes() { # LIMIT_S RDZV_ID COMM_CHECK_ARGS... : 3 agents in the background
  local limit=$1 id=$2 i; shift 2
  for i in 2 1 0; do   # node 0 last: the others retry until the host listens
    ip netns exec "${NS[$i]}" "$DTRUN" --nnodes=3 --nproc-per-node=2 \
      --rdzv-endpoint=10.77.0.1:29400 --rdzv-id="$id" -- "$T/comm_check" "$@" "$MARK" \
      >"$T/n$i.out" 2>"$T/n$i.err" &
    AG[$i]=$!
  done
  ( sleep "$limit"; kill -9 "${AG[@]}" ) >/dev/null 2>&1 &
  WD=$!
}
since() { awk -v a="$1" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }'; }
wait_nodes() { # sets RCS to the three exit statuses
  local i
  RCS=""
  for i in 0 1 2; do wait "${AG[$i]}"; RCS="$RCS $?"; done
  pkill -P "$WD" 2>/dev/null; kill "$WD" 2>/dev/null; wait "$WD" 2>/dev/null
  AG=() WD=""
}

# ---- every collective across the namespaces ----
t0=$(date +%s.%N)
export DTRUN_COMM_TIMEOUT=30
start_nodes 90 comm$NETNS_ID
wait_nodes
secs=$(since "$t0")
out=$(cat "$T"/n0.out "$T"/n1.out "$T"/n2.out)
[ "$RCS" = " 0 0 0" ] || { echo "$out" | grep -v ' passed: '; tail -n 5 "$T"/n*.err; fail "exit statuses:$RCS"; }
passed=$(echo "$out" | sed -n 's/^\[default\/\([0-9]\)\]:comm_check: rank \1 of 6 passed: world tcp, local shm (2), cross tcp (3), .*/\1/p' |
  sort -n | tr '\n' ' ')
[ "$passed" = "0 1 2 3 4 5 " ] || { echo "$out"; fail "ranks that passed: $passed"; }
echo "ok: 3 namespaces x 2 workers: world and cross-node group over tcp, node groups over shm;" \
     "every collective, f32+bf16, counts 0/7/1Mi+3, sync+async, matches its reference ($secs s)"

# ---- a node dies mid-collective ----
timeout_s=2
export DTRUN_COMM_TIMEOUT=$timeout_s
start_nodes 60 kill$NETNS_ID --loop 30
wait_for "cat $T/n*.out | grep -c 'comm_check: rank . looping'" 6 30 ||
  { cat "$T"/n*.out "$T"/n*.err; fail "the 6 ranks did not all start looping"; }
[ "$(readlink /proc/"${AG[2]}"/exe)" = "$DTRUN" ] || fail "pid ${AG[2]} is not node 2's agent"
victims=$(sed -n 's/^\[default\/\([0-9]\)\]:comm_check: rank \1 looping$/\1/p' "$T/n2.out" | sort -n | tr '\n' ' ')
[ "$(echo $victims | wc -w)" = 2 ] || fail "node 2's ranks: '$victims'"
sleep 0.3
t0=$(date +%s.%N)
{ kill -9 "${AG[2]}"; wait_nodes; } 2>/dev/null   # quiet: bash's "Killed" notice
secs=$(since "$t0")
set -- $RCS
[ "$3" = 137 ] || fail "node 2's agent: exit $3, want 137 (SIGKILL)"
[ "$1" != 0 ] && [ "$2" != 0 ] || { tail -n 5 "$T"/n*.err; fail "a surviving node exited 0 (statuses:$RCS)"; }
# Within the comm timeout plus the agents' teardown: no survivor waited longer.
awk -v s="$secs" -v t=$timeout_s 'BEGIN { exit !(s < t + 8) }' || fail "the job took ${secs} s to end after the kill"
survivors=0
for r in 0 1 2 3 4 5; do
  case " $victims" in *" $r "*) continue;; esac
  survivors=$((survivors + 1))
  line=$(cat "$T"/n0.out "$T"/n1.out | grep "^\[default/$r\]:comm_check: rank $r failed after ")
  [ -n "$line" ] || { head -n 40 "$T"/n*.out "$T"/n*.err; fail "survivor rank $r reported no error"; }
  case ${line#*(timeout *): } in *"rank "*) ;; *) fail "rank $r's error names no rank: $line";; esac
  took=$(echo "$line" | sed -n 's/.* the failing call took \([0-9.]*\) s .*/\1/p')
  awk -v s="$took" -v t=$timeout_s 'BEGIN { exit !(s != "" && s <= t + 1) }' || fail "rank $r's failing call took $took s (timeout $timeout_s s): $line"
  echo "  ${line#*]:}"
done
[ $survivors = 4 ] || fail "$survivors survivors"
echo "ok: node 2 (ranks ${victims% }) killed mid-all_reduce: the 4 survivors failed within the" \
     "${timeout_s} s timeout, the job exited${RCS} in $secs s"
