#!/usr/bin/env bash
# A rank that stops answering (SIGSTOP) is the root cause (issue 15.9): its
# peers time out in a collective waiting for it, and the agent's root-cause
# line names the stopped rank and the last collective it entered (from its
# beacon page, lib/util/beacon.h), not the first peer that exited; the stopped
# worker is killed at once rather than after --term-timeout; dtrun exits 4, the
# peers' communication error.
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
echo "$line" | grep -Eq "the last collective it entered: (all_reduce|all_gather|reduce_scatter|broadcast|barrier) #[0-9]+ in " ||
  { cat "$T/err"; fail "the root cause does not name the last collective rank 2 entered: $line"; }
! grep -q "still running 10 s after the stop signal" "$T/err" || fail "the stopped worker was left to --term-timeout"
[ $(( $(date +%s) - start )) -lt 9 ] || fail "took $(( $(date +%s) - start )) s"
kill -0 "$victim" 2>/dev/null && ! grep -q '^State:.*Z' "/proc/$victim/status" && fail "the stopped worker still lives"
echo "ok: $line"
