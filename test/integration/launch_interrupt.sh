#!/usr/bin/env bash
# Ctrl-C and a closed terminal stop a training run the way SIGTERM does (issue
# 15.1): dtrun runs in a process group of its own, as a terminal's foreground
# job, and SIGINT (then SIGHUP) goes to that whole group, as the terminal sends
# it. The step finishes, a checkpoint is written, one line says where, dtrun
# exits 128 + the signal, and the resumed run ends bitwise on the uninterrupted
# one. A second Ctrl-C during a slow save stops at once.
source "$(dirname "$0")/../parallel/ckpt.bash"
STEPS=30
LAY="dp=2"

job() { # NAME -> $T/NAME.yaml, metrics $T/NAME.jsonl, checkpoints $T/NAME.ck
  ckpt_job gpt-tiny "$LAY" "$T/$1.yaml" "$T/$1.jsonl" "$T/$1.ck"
  printf '  every: 0\n' >>"$T/$1.yaml"
}
# start NAME: dtrun as the leader of a new process group (setsid: not a group
# leader here, so it execs in place and $! is dtrun's pid = the group id)
start() {
  setsid "$DTRUN" --nproc-per-node=2 "$T/$1.yaml" >"$T/$1.out" 2>"$T/$1.err" &
  AGENT=$!
  ( sleep 60 && kill -9 $AGENT ) >/dev/null 2>&1 &
  WATCHDOG=$!
}
finish() {
  wait $AGENT; RC=$?
  pkill -P $WATCHDOG 2>/dev/null; kill $WATCHDOG 2>/dev/null; wait $WATCHDOG 2>/dev/null
  return 0
}

job ref
ckpt_run "$LAY" "$T/ref.yaml" "$T/ref.log" DTRUN_DUMP_PARAMS="$T/ref.bin" || { tail "$T/ref.log"; fail "reference run"; }

# interrupt SIGNAL WANT_RC: stop at step >= 5 by SIGNAL to the group, resume, compare
interrupt() {
  local sig=$1 want=$2 name=${1,,} s
  job "$name"
  DTRUN_TEST_STEP_DELAY_MS=40 start "$name"
  wait_step "$T/$name.jsonl" 5 30 || { tail "$T/$name.err"; fail "$sig: step 5 not reached"; }
  kill -"$sig" -- -"$AGENT"
  finish
  [ "$RC" = "$want" ] || { tail "$T/$name.err"; fail "dtrun exited $RC after $sig to its process group, want $want"; }
  s=$(sed -n "s/.*$sig: stopped at step \([0-9]*\) with a checkpoint in .*/\1/p" "$T/$name.out")
  [ -n "$s" ] && [ "$s" -lt $STEPS ] || { tail "$T/$name.out" "$T/$name.err"; fail "$sig: no '$sig: stopped at step N with a checkpoint' line"; }
  [ "$(grep -c "stopped at step" "$T/$name.out")" = 1 ] || fail "$sig: want exactly one stop line"
  ! grep -q "root cause" "$T/$name.err" || { cat "$T/$name.err"; fail "$sig: a clean stop reported a failure"; }
  [ "$(cat "$T/$name.ck/latest")" = "$(printf 'step_%06d' "$s")" ] || fail "$sig: latest is not step $s"
  ckpt_run "$LAY" "$T/$name.yaml" "$T/$name.2.log" DTRUN_DUMP_PARAMS="$T/$name.bin" || { tail "$T/$name.2.log"; fail "$sig: resume"; }
  grep -q "resuming from $T/$name.ck/$(printf 'step_%06d' "$s"): step $s" "$T/$name.2.log" || fail "$sig: not resumed from $s"
  cmp -s "$T/ref.bin" "$T/$name.bin" || fail "$sig: final parameters differ from the uninterrupted run"
  echo "ok: $sig to the process group -> checkpoint at step $s, exit $want; resumed run equals the reference bitwise"
}
interrupt INT 130
interrupt HUP 129

# A second Ctrl-C while the checkpoint is being written (held 20 s): dtrun stops at once.
job twice
DTRUN_TEST_STEP_DELAY_MS=40 DTRUN_TEST_CKPT_DELAY_MS=20000 start twice
wait_step "$T/twice.jsonl" 3 30 || fail "twice: step 3 not reached"
kill -INT -- -"$AGENT"
sleep 1
t0=$(date +%s%N)
kill -INT -- -"$AGENT"
finish
ms=$(( ($(date +%s%N) - t0) / 1000000 ))
[ "$RC" = 130 ] || { tail "$T/twice.err"; fail "second Ctrl-C: exit $RC, want 130"; }
[ $ms -lt 3000 ] || fail "second Ctrl-C: dtrun took $ms ms to stop"
grep -q "SIGINT again: killing the workers" "$T/twice.err" || { tail "$T/twice.err"; fail "second Ctrl-C: no line"; }
echo "ok: a second Ctrl-C during the save stops dtrun in $ms ms"
