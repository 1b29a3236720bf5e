#!/usr/bin/env bash
# kill -9 of one worker: with --max-restarts=1 the group stops, the root cause is
# reported, every worker restarts (TORCHELASTIC_RESTART_COUNT=1) and the job
# succeeds; without restarts dtrun exits 137 (128 + SIGKILL).
source "$(dirname "$0")/../helpers/launch_common.bash"
build_kv_barrier
W='echo $$ >'"$T"'/pid.$RANK.$TORCHELASTIC_RESTART_COUNT; echo "up $RANK restart $TORCHELASTIC_RESTART_COUNT";
   if [ "$TORCHELASTIC_RESTART_COUNT" = 0 ]; then exec sleep 60; fi; exec '"$T"'/kv_barrier again 20'
start_agent --nproc-per-node=8 --max-restarts=1 -- sh -c "$W" $MARK
wait_for 'ls '"$T"'/pid.*.0 2>/dev/null | wc -l' 8 15 || fail "8 workers did not start"
victim=$(cat "$T/pid.3.0")
kill -9 "$victim"
wait_agent; rc=$RC
[ $rc -eq 0 ] || { cat "$T/err"; fail "dtrun exited $rc after a restart, want 0"; }
for r in 0 1 2 3 4 5 6 7; do
  grep -qx "\[default/$r\]:up $r restart 1" "$T/out" || fail "rank $r did not restart"
  grep -qx "\[default/$r\]:kv_barrier: rank $r of 8 passed again" "$T/out" || fail "rank $r did not pass the barrier after the restart"
done
grep -q "rank 3 (local rank 3, .*pid $victim.*killed by SIGKILL" "$T/err" || { cat "$T/err"; fail "no root cause naming rank 3 and SIGKILL"; }
grep -q "restarting the workers (restart 1 of 1)" "$T/err" || fail "no restart line"
[ "$(ls "$T"/pid.*.1 | wc -l)" = 8 ] || fail "not all 8 workers ran again"
for f in "$T"/pid.*.0; do kill -0 "$(cat "$f")" 2>/dev/null && fail "a worker of attempt 0 still runs"; done

# No restarts left: the killed worker's status is dtrun's.
rm -f "$T"/pid.*
start_agent --nproc-per-node=2 -- sh -c "$W" $MARK
wait_for 'ls '"$T"'/pid.*.0 2>/dev/null | wc -l' 2 15 || fail "2 workers did not start"
kill -9 "$(cat "$T/pid.1.0")"
wait_agent; rc=$RC
[ $rc -eq 137 ] || { cat "$T/err"; fail "dtrun exited $rc, want 137"; }
echo "ok: restart after kill -9, then 137 without restarts"
