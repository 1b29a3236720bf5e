#!/usr/bin/env bash
# A rank that stops answering (SIGSTOP) is the root cause (issue 15.9): its
# peers time out in a collective waiting for it, and the agent's root-cause
# line names the stopped rank and the last collective it entered (from its
# beacon page, lib/util/beacon.h), not the first peer that exited; the stopped
# worker is killed at once rather than after --term-timeout; dtrun exits 4, the
# peers' communication error. The hung rank's last collective and the one its
# peers wait in carry numbers of one count (each rank's own), and ranks are
# named by their global rank only (issue 26.6); with a restart, restart_reason
# says the rank stopped answering and dtrun killed it.
source "$(dirname "$0")/../helpers/launch_common.bash"
sed -e 's/^  steps: .*/  steps: 400/' test/parallel/gpt-tiny.yaml >"$T/hung.yaml"
printf '  metrics: %s/m.jsonl\nparallel:\n  dp: 4\n' "$T" >>"$T/hung.yaml"
start=$(date +%s)
DTRUN_COMM_TIMEOUT=2 DTRUN_TEST_STEP_DELAY_MS=30 start_agent --nproc-per-node=4 "$T/hung.yaml"
wait_for 'grep -c "\"loss\"" '"$T"'/m.jsonl 2>/dev/null | awk "{print (\$1 >= 5)}"' 1 20 || { cat "$T/err"; fail "step 5 not reached"; }
victim=
for p in $(pgrep -f "dtrun worker $T/hung.yaml"); do
  tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx RANK=2 && victim=$p
done
[ -n "$victim" ] || fail "no worker of rank 2"
kill -STOP "$victim"
wait_agent; rc=$RC
[ $rc = 4 ] || { cat "$T/err"; fail "dtrun exited $rc, want 4 (the peers' communication error)"; }
line=$(grep -A1 "root cause" "$T/err" | tail -1)
echo "$line" | grep -q "rank 2 (local rank 2, .*pid $victim).*stopped answering" || { cat "$T/err"; fail "the root cause does not name the stopped rank 2: $line"; }
coll='(all_reduce|all_gather|reduce_scatter|broadcast|barrier) #[0-9]+ of (world|group\[[0-9,]+\])'
echo "$line" | grep -Eq "the last collective it entered: $coll \(rank 2's collective #[0-9]+\)$" ||
  { cat "$T/err"; fail "the root cause does not name the last collective rank 2 entered: $line"; }
# One numbering to compare (issue 26.6): each rank's own count of collectives.
# Under dp every rank enters the same ones in the same order, so the peers wait
# in rank 2's last collective or in the one after it.
last=$(echo "$line" | sed -E "s/.*rank 2's collective #([0-9]+)\)$/\1/")
peers=0
for r in 0 1 3; do # the first peer to time out stops the others: not all of them may say it
  peer=$(grep -E "^\[default/$r\]:dtrun: rank $r: .*$coll \(rank $r's collective #[0-9]+\): timed out after .* waiting for rank 2" "$T/err" |
         sed -E "s/.*rank $r's collective #([0-9]+)\).*/\1/")
  [ -n "$peer" ] || continue
  peers=$((peers + 1))
  [ "$peer" -eq "$last" ] || [ "$peer" -eq $((last + 1)) ] || { cat "$T/err"; fail "rank $r waits in its collective #$peer, rank 2 last entered #$last"; }
done
[ $peers -ge 1 ] || { cat "$T/err"; fail "no peer line naming its collective and rank 2"; }
! grep -Eq "rank [0-9]+ \(world [0-9]" "$T/err" || { cat "$T/err"; fail "a rank is still named as 'rank N (world M)'"; }
! grep -q "still running 10 s after the stop signal" "$T/err" || fail "the stopped worker was left to --term-timeout"
[ $(( $(date +%s) - start )) -lt 9 ] || fail "took $(( $(date +%s) - start )) s"
kill -0 "$victim" 2>/dev/null && ! grep -q '^State:.*Z' "/proc/$victim/status" && fail "the stopped worker still lives"
echo "ok: $line"

# The restart reason of such a failure says what happened: the rank stopped
# answering and dtrun killed it (not "killed by SIGKILL").
rm -f "$T/m.jsonl"
DTRUN_COMM_TIMEOUT=2 DTRUN_TEST_STEP_DELAY_MS=30 start_agent --nproc-per-node=4 --max-restarts=1 "$T/hung.yaml"
wait_for 'grep -c "\"loss\"" '"$T"'/m.jsonl 2>/dev/null | awk "{print (\$1 >= 5)}"' 1 20 || { cat "$T/err"; fail "step 5 not reached"; }
victim=
for p in $(pgrep -f "dtrun worker $T/hung.yaml"); do
  tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx RANK=2 && victim=$p
done
[ -n "$victim" ] || fail "no worker of rank 2"
kill -STOP "$victim"
wait_for 'grep -c "\"attempt\":1" '"$T"'/m.jsonl 2>/dev/null | awk "{print (\$1 >= 1)}"' 1 20 || { cat "$T/err"; kill -TERM $AGENT; fail "no second attempt"; }
kill -TERM $AGENT; wait_agent
reason=$(grep '"event":"attempt_start","attempt":1' "$T/m.jsonl" | sed -E 's/.*"restart_reason":"([^"]*)".*/\1/')
[ "$reason" = "rank 2 stopped answering (its process was stopped) and dtrun killed it" ] ||
  { cat "$T/m.jsonl"; fail "restart_reason: '$reason'"; }
echo "ok: restart_reason: $reason"
