#!/usr/bin/env bash
# Streams (issue 25, item 3): the trainer writes what the run does (steps,
# evaluations, the summary, checkpoints saved, the resume line, a stop) to
# stdout and only warnings and errors to stderr, so `dtrun job.yaml > out 2> err`
# and `| tee` work as with every other tool, with one worker and with two; the
# agent's own lines are diagnostics (stderr), so `dtrun -- PROGRAM`'s stdout is
# the program's. log.progress auto draws the live line when dtrun's own stdout
# is a terminal (the agent tells the workers: DTRUN_STDOUT_TTY), and only then.
source "$(dirname "$0")/../helpers/preflight.bash"
cd "$T" || exit 1
command -v script >/dev/null || { echo "skip: no script(1) for a terminal"; exit 77; }

# only_warnings NAME: every line of NAME.err is a warning (none is fine)
only_warnings() {
  local bad; bad=$(grep -v 'warning' "$T/$1.err" | head -3)
  [ -z "$bad" ] || { fail "$1: stderr holds more than warnings: $bad"; return 1; }
}

for n in 1 2; do
  tiny_job j$n.yaml "parallel: {dp: $n}" "checkpoint: {dir: ck$n, every: 2}" "log: {metrics: m$n.jsonl}"
  sed -i 's/steps: 4/steps: 6/' j$n.yaml
  DTRUN_TEST_STOP_STEP=2 run_dtrun stop$n --nproc-per-node=$n j$n.yaml
  [ "$rc" -eq 0 ] || fail "$n workers, stopped run: exit $rc: $(tail -2 "$T/stop$n.err")"
  run_dtrun rest$n --nproc-per-node=$n j$n.yaml
  [ "$rc" -eq 0 ] || fail "$n workers, resumed run: exit $rc: $(tail -2 "$T/rest$n.err")"
  cat "$T/stop$n.out" "$T/rest$n.out" >"$T/all$n.out"
  missing=""
  for want in "step 1/6 | loss" "checkpoint step 2 saved to ck$n" "SIGUSR1\|DTRUN_TEST_STOP_STEP: stopped at step 2" \
              "resuming from ck$n/step_000002: step 2" "step 6/6 | loss" "eval step 6 | val_loss" "done: 6 steps"; do
    grep -q "^\[default/0\]:.*\($want\)" "$T/all$n.out" || missing="$missing [$want]"
  done
  [ $n = 2 ] && ! grep -q "layout dp=2" "$T/all$n.out" && missing="$missing [layout]"
  [ -z "$missing" ] && [ ! -s "$T/stop$n.err" ] && [ ! -s "$T/rest$n.err" ] &&
    ok "$n worker(s): steps, saves, stop, resume, eval and summary on stdout; stderr empty" ||
    fail "$n worker(s): missing on stdout:$missing; stderr: $(head -3 "$T/stop$n.err" "$T/rest$n.err")"
  ! grep -q $'\r' "$T/all$n.out" && ok "$n worker(s): no live line into a file (log.progress auto)" || fail "$n: a live line in a file"
done

# a warning goes to stderr, and nothing else does: the data changed since the
# checkpoint (same size, other bytes)
python3 -c 'import os; open("corpus.txt", "wb").write(bytes(b % 200 for b in os.urandom(1 << 16)))'
tiny_job t.yaml "data: {kind: text, train: corpus.txt}" "checkpoint: {dir: ckt}"
sed -i 's/vocab_size: 32/vocab_size: 256/' t.yaml
run_dtrun t1 t.yaml
python3 -c 'f = open("corpus.txt", "r+b"); f.write(b"changed")'
sed -i 's/steps: 4/steps: 6/' t.yaml
run_dtrun t2 t.yaml
[ "$rc" -eq 0 ] && grep -q "warning: data file .*corpus.txt changed since the checkpoint" "$T/t2.err" &&
  grep -q "done: 6 steps" "$T/t2.out" && only_warnings t2 && ok "the data warning on stderr, the run on stdout" ||
  fail "data warning: exit $rc: $(cat "$T/t2.err")"

# a program's stdout is its own: the agent's lines go to stderr
"$DTRUN" --nproc-per-node=2 --max-restarts=1 -- /bin/sh -c 'echo "out $RANK"; echo "err $RANK" >&2' >p.out 2>p.err; rc=$?
[ "$rc" -eq 0 ] && [ "$(sort p.out)" = $'[default/0]:out 0\n[default/1]:out 1' ] &&
  [ "$(grep -c 'err [01]' p.err)" -eq 2 ] && ok "dtrun -- PROGRAM: its stdout alone on stdout" ||
  fail "program streams: exit $rc: out '$(cat p.out)' err '$(cat p.err)'"

# the terminal decision is the agent's: its stdout a terminal (script(1)) or not
script -qec "$DTRUN -- /bin/sh -c 'echo tty=\$DTRUN_STDOUT_TTY' 2>/dev/null" tty.log >/dev/null
"$DTRUN" -- /bin/sh -c 'echo tty=$DTRUN_STDOUT_TTY' >file.log 2>/dev/null
grep -q 'tty=1' tty.log && grep -q 'tty=0' file.log && ok "DTRUN_STDOUT_TTY: 1 on a terminal, 0 into a file" ||
  fail "DTRUN_STDOUT_TTY: terminal '$(grep tty= tty.log)', file '$(cat file.log)'"

# log.progress auto on a terminal: one line redrawn in place, stderr still empty
tiny_job live.yaml "parallel: {dp: 2}"
sed -i 's/steps: 4/steps: 6/' live.yaml
script -qec "DTRUN_TEST_STEP_DELAY_MS=20 $DTRUN --nproc-per-node=2 live.yaml 2>live.err" live.log >/dev/null
grep -q $'\r\033\\[K\\[default/0\\]:step 2/6 | loss' live.log && grep -q 'done: 6 steps' live.log && [ ! -s live.err ] &&
  ok "log.progress auto: the live line on a terminal" || fail "no live line on a terminal: $(cat -v live.log | head -5)"
finish
