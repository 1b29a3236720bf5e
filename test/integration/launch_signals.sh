#!/usr/bin/env bash
# Signals to dtrun reach the workers: SIGTERM stops the job (exit 143) after
# the workers saw it; SIGUSR1 is only passed on (the job goes on), and workers
# that die of it are not restarted (exit 138); a worker that ignores SIGTERM is
# killed after --term-timeout.
source "$(dirname "$0")/../helpers/launch_common.bash"
W='trap "echo got TERM; exit 0" TERM; trap "echo got USR1; touch '"$T"'/usr1.$RANK" USR1; echo ready;
   while [ ! -e '"$T"'/stop ]; do sleep 0.05; done; echo stopped'
start_agent --nproc-per-node=4 -- bash -c "$W" $MARK
wait_for 'grep -c ":ready$" '"$T"'/out' 4 15 || fail "workers not ready"
kill -TERM $AGENT
wait_agent; rc=$RC
[ $rc -eq 143 ] || { cat "$T/out" "$T/err"; fail "dtrun exited $rc after SIGTERM, want 143"; }
[ "$(grep -c ':got TERM$' "$T/out")" = 4 ] || { cat "$T/out"; fail "not every worker saw SIGTERM"; }
echo "ok: SIGTERM forwarded to 4 workers, exit 143"

start_agent --nproc-per-node=4 -- bash -c "$W" $MARK
wait_for 'grep -c ":ready$" '"$T"'/out' 4 15 || fail "workers not ready"
kill -USR1 $AGENT
wait_for 'ls '"$T"'/usr1.* 2>/dev/null | wc -l' 4 10 || fail "SIGUSR1 did not reach every worker"
touch "$T/stop"
wait_agent; rc=$RC
[ $rc -eq 0 ] || { cat "$T/err"; fail "dtrun exited $rc after SIGUSR1, want 0 (the job goes on)"; }
[ "$(grep -c ':stopped$' "$T/out")" = 4 ] || fail "workers did not finish after SIGUSR1"
echo "ok: SIGUSR1 forwarded, job finished normally"

# A program with no handler for SIGUSR1 dies of it (Slurm's warning before the
# time limit, to a torchrun-style script): the workers were asked to stop, so
# the others stop too, nothing restarts even with restarts left, exit 138.
rm -f "$T/stop"
start_agent --nproc-per-node=2 --max-restarts=3 -- bash -c 'echo ready; while :; do sleep 0.05; done' $MARK
wait_for 'grep -c ":ready$" '"$T"'/out' 2 15 || fail "workers not ready"
kill -USR1 $AGENT
wait_agent; rc=$RC
[ $rc -eq 138 ] || { cat "$T/err"; fail "dtrun exited $rc after SIGUSR1 killed the workers, want 138"; }
grep -q "died of SIGUSR1, which dtrun passed on to the workers (it has no handler for it): stopping the others; no restart$" "$T/err" &&
  ! grep -q "restarting" "$T/err" || { cat "$T/err"; fail "no line, or a restart, after SIGUSR1 killed a worker"; }
[ "$(grep -c ":ready$" "$T/out")" = 2 ] || fail "the workers were started again"
echo "ok: workers without a SIGUSR1 handler die of it: no restart, exit 138"

start=$(date +%s)
start_agent --nproc-per-node=2 --term-timeout=1 -- bash -c 'trap "" TERM INT; echo ready; while :; do sleep 0.05; done' $MARK
wait_for 'grep -c ":ready$" '"$T"'/out' 2 15 || fail "workers not ready"
kill -INT $AGENT
wait_agent; rc=$RC
[ $rc -eq 130 ] || fail "dtrun exited $rc after SIGINT, want 130"
grep -q "still running 1 s after the stop signal; sending SIGKILL" "$T/err" || { cat "$T/err"; fail "no SIGKILL line"; }
[ $(( $(date +%s) - start )) -lt 10 ] || fail "took too long"
[ "$(count_workers)" = 0 ] || fail "workers left"
echo "ok: SIGINT, workers ignoring it killed after --term-timeout"
